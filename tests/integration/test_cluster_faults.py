"""Faults in a three-broker cluster of real processes.

Every scenario runs RF=3 (or the replica set it names), min.insync.replicas=2 and an
idempotent acks=all librdkafka producer where it produces a stream, breaks brokers with
signals — SIGKILL (a crash), SIGSTOP/SIGCONT (a hung process), SIGTERM (controlled
shutdown) — or stops the controller quorum, and then checks the guarantees:

- every acknowledged record is in the log exactly once, in order (`verify_sequence`);
- after the cluster heals, every replica holds the same batches byte for byte below the
  high watermark, and the same leader-epoch-checkpoint.

KIP-101's two scenarios are reproduced step by step: high-watermark truncation followed
by a leader election (a restarted follower must not cut its log back to a stale
checkpointed HW), and an unclean election whose old leader must truncate its divergent
tail by epoch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from support.cluster import ClusterProcess
from support.sequence_producer import SequenceProducer, read_partition, verify_sequence

TOPIC_CONFIG: Mapping[str, str] = {"min.insync.replicas": "2"}
UNCLEAN_CHECK_MS = 500
ClusterFactory = Callable[..., ClusterProcess]


def _check_all_replicas(cluster: ClusterProcess, topic: str, partition: int = 0) -> int:
    """Every replica byte-identical below the HW, same epoch checkpoint; returns the HW."""
    hw = cluster.assert_replicas_identical_below_hw(topic, partition, timeout=60)
    cluster.assert_epoch_checkpoints_identical(topic, partition, timeout=60)
    return hw


def _produce_values(bootstrap: str, topic: str, values: range, partition: int = 0) -> None:
    """acks=all, one value at a time, each acknowledged before the next is sent."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    errors: list[str] = []
    for value in values:
        producer.produce(
            topic,
            str(value).encode(),
            partition=partition,
            on_delivery=lambda err, _msg: errors.append(str(err)) if err else None,
        )
        assert producer.flush(30) == 0
    assert not errors, errors


def _create_assigned_topic(
    cluster: ClusterProcess, topic: str, replicas: list[int], config: Mapping[str, str]
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    new = NewTopic(topic, 1, replica_assignment=[replicas], config=dict(config))
    admin.create_topics([new], operation_timeout=30)[topic].result(30)
    cluster.wait_for_leader(topic, 0)
    cluster.wait_until_isr(topic, 0, replicas)


def test_leader_sigkill_loses_no_acknowledged_record(cluster: ClusterProcess) -> None:
    """SIGKILL the leader mid-stream: a new leader from the ISR takes over, the producer
    and a consumer carry on, nothing acknowledged is lost or duplicated."""
    cluster.create_topic("kill-leader", config=TOPIC_CONFIG)
    producer = SequenceProducer(cluster.bootstrap(), "kill-leader").start()
    producer.wait_for_acks(2000)
    old = cluster.leader_of("kill-leader", 0)
    cluster.kill(old)
    killed_at = time.monotonic()
    new = cluster.wait_for_leader("kill-leader", 0, exclude=[old])
    assert new.leader_epoch > 0
    producer.wait_for(lambda t: any(at > killed_at for at in t.ack_times.values()), timeout=60)
    producer.wait_for_acks(2000)
    tally = producer.stop()
    assert not tally.failed, list(tally.failed.items())[:5]
    live = [n for n in cluster.brokers if n != old]
    hw = cluster.assert_replicas_identical_below_hw("kill-leader", 0, nodes=live)
    verify_sequence(read_partition(cluster.bootstrap(), "kill-leader", 0, hw), tally)
    cluster.start_broker(old)
    cluster.wait_until_isr("kill-leader", 0, cluster.brokers, timeout=60)
    _check_all_replicas(cluster, "kill-leader")


def test_controller_sigkill_moves_the_controller(cluster: ClusterProcess) -> None:
    old = cluster.wait_for_controller()
    cluster.kill(old)
    new = cluster.wait_for_controller(exclude=[old], timeout=60)
    assert new != old
    cluster.wait_until_fenced(old)
    cluster.create_topic("after-controller", replication_factor=2)
    _produce_values(cluster.bootstrap(), "after-controller", range(100))
    hw = cluster.high_watermark("after-controller", 0)
    assert hw == 100
    assert [v for _, v in read_partition(cluster.bootstrap(), "after-controller", 0, hw)] == list(
        range(100)
    )
    cluster.start_broker(old)
    _check_all_replicas(cluster, "after-controller")


def test_paused_follower_leaves_and_rejoins_the_isr(cluster: ClusterProcess) -> None:
    cluster.create_topic("pause-follower", config=TOPIC_CONFIG)
    leader = cluster.leader_of("pause-follower", 0)
    follower = next(n for n in cluster.brokers if n != leader)
    producer = SequenceProducer(cluster.bootstrap(), "pause-follower").start()
    producer.wait_for_acks(500)
    cluster.pause(follower)
    others = [n for n in cluster.brokers if n != follower]
    cluster.wait_until_isr("pause-follower", 0, others, timeout=60)
    producer.wait_for_acks(1000)  # min.insync.replicas=2 still holds without it
    cluster.resume(follower)
    cluster.wait_until_isr("pause-follower", 0, cluster.brokers, timeout=60)
    producer.wait_for_acks(500)
    tally = producer.stop()
    assert not tally.failed
    hw = _check_all_replicas(cluster, "pause-follower")
    verify_sequence(read_partition(cluster.bootstrap(), "pause-follower", 0, hw), tally)


def test_brokers_serve_while_the_controller_is_down_and_recover_after(
    cluster_factory: ClusterFactory,
) -> None:
    """The whole controller quorum away (one dedicated controller, killed): brokers keep
    their leaderships and serve produce and fetch from what they replicated, as Kafka's
    brokers do (BrokerLifecycleManager retries its heartbeats; nothing fences them). Once
    the controller is back, the control plane works again: a new topic, a failover."""
    cluster = cluster_factory(controllers=1)
    (controller,) = cluster.controllers
    cluster.create_topic("no-controller", config=TOPIC_CONFIG)
    producer = SequenceProducer(cluster.bootstrap(), "no-controller").start()
    producer.wait_for_acks(500)
    cluster.kill(controller)
    # Longer than broker.session.timeout.ms: no controller is left to fence anyone.
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        producer.wait_for_acks(100, timeout=30)
    cluster.start_broker(controller)
    assert cluster.wait_for_controller(timeout=60) == controller
    cluster.wait_for_brokers(cluster.brokers, timeout=60)
    producer.wait_for_acks(500)
    cluster.create_topic("no-controller-new", replication_factor=3)
    old = cluster.leader_of("no-controller", 0)
    cluster.kill(old)
    cluster.wait_for_leader("no-controller", 0, exclude=[old], timeout=60)
    producer.wait_for_acks(500)
    tally = producer.stop()
    assert not tally.failed
    cluster.start_broker(old)
    cluster.wait_until_isr("no-controller", 0, cluster.brokers, timeout=60)
    hw = _check_all_replicas(cluster, "no-controller")
    verify_sequence(read_partition(cluster.bootstrap(), "no-controller", 0, hw), tally)


def test_kip_101_stale_high_watermark_does_not_truncate(
    cluster_factory: ClusterFactory,
) -> None:
    """KIP-101, scenario 1: leader A and follower B both hold records 0 and 1, but B's
    checkpointed HW is behind. B crashes and restarts while A cannot answer; then A is
    lost and B leads. Truncating to the HW at restart would have erased acknowledged
    records on B, and then on A when it came back to follow B. With leader epochs
    nothing is lost."""
    cluster = cluster_factory(
        # A dedicated controller: the test takes both replicas' brokers down. Once A is
        # fenced, B is elected by the controller's periodic unclean election: every
        # half second here (Kafka's maybeElectUncleanLeaders, 5 minutes by default).
        controllers=1,
        overrides={"unclean.leader.election.interval.ms": UNCLEAN_CHECK_MS},
        # B (2) never checkpoints its HW on its own, so its file stays behind.
        broker_overrides={2: {"replica.high.watermark.checkpoint.interval.ms": 3_600_000}},
    )
    a, b = 1, 2
    _create_assigned_topic(cluster, "kip-101-hw", [a, b], {"min.insync.replicas": "1"})
    _produce_values(cluster.bootstrap(), "kip-101-hw", range(2))
    cluster.assert_replicas_identical_below_hw("kip-101-hw", 0, high_watermark=2)
    cluster.kill(b)
    stale = cluster.checkpointed_high_watermark(b, "kip-101-hw", 0)
    assert stale is None or stale < 2, f"B's checkpointed HW {stale} is not stale"
    cluster.wait_until_isr("kip-101-hw", 0, [a])
    cluster.pause(a)  # B restarts and cannot fetch: only its own log counts
    cluster.start_broker(b)
    # A is lost; B, the only replica left, is elected (out of the ISR: allowed here).
    cluster.kill(a)
    cluster.wait_for_controller(exclude=[a], timeout=60)
    _allow_unclean(cluster, "kip-101-hw", [b])
    state = cluster.wait_for_leader("kip-101-hw", 0, exclude=[a], timeout=60)
    assert state.leader == b
    assert [v for _, v in read_partition(cluster.bootstrap([b]), "kip-101-hw", 0, 2)] == [0, 1]
    _produce_values(cluster.bootstrap([b]), "kip-101-hw", range(2, 4))
    cluster.start_broker(a)
    cluster.wait_until_isr("kip-101-hw", 0, [a, b], timeout=60)
    hw = _check_all_replicas(cluster, "kip-101-hw")
    assert hw == 4
    assert [v for _, v in read_partition(cluster.bootstrap(), "kip-101-hw", 0, 4)] == [0, 1, 2, 3]


def _allow_unclean(cluster: ClusterProcess, topic: str, nodes: list[int]) -> None:
    # librdkafka sends it to the controller it last heard of: refresh often.
    admin = AdminClient(
        {"bootstrap.servers": cluster.bootstrap(nodes), "topic.metadata.refresh.interval.ms": 500}
    )
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "unclean.leader.election.enable",
                "true",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def test_unclean_election_truncates_divergent_tail_by_epoch(
    cluster_factory: ClusterFactory,
) -> None:
    """A leads alone after B is lost and takes records B never sees; A is lost too, B is
    elected uncleanly and takes different records at the same offsets. When A returns
    it truncates its divergent tail by epoch: both end with identical logs and
    leader-epoch-checkpoint files, holding B's records."""
    # A dedicated controller: the test takes both replicas' brokers down. It looks for
    # leaderless partitions whose topic now allows an unclean election every half second
    # (Kafka's maybeElectUncleanLeaders, every 5 minutes by default).
    cluster = cluster_factory(
        controllers=1, overrides={"unclean.leader.election.interval.ms": UNCLEAN_CHECK_MS}
    )
    a, b = 1, 2
    _create_assigned_topic(cluster, "unclean", [a, b], {"min.insync.replicas": "1"})
    _produce_values(cluster.bootstrap(), "unclean", range(0, 10))
    cluster.assert_replicas_identical_below_hw("unclean", 0, high_watermark=10)
    cluster.kill(b)
    cluster.wait_until_isr("unclean", 0, [a])
    _produce_values(cluster.bootstrap([a]), "unclean", range(100, 110))  # only A has them
    cluster.kill(a)
    cluster.start_broker(b)
    cluster.wait_until_fenced(a)
    cluster.wait_for_controller(exclude=[a], timeout=60)
    # The controller had its chances to elect B; it must not have.
    time.sleep(2 * UNCLEAN_CHECK_MS / 1000)
    state = cluster.partition_state("unclean", 0)
    assert state is not None and state.leader == -1, f"elected without unclean election: {state}"
    _allow_unclean(cluster, "unclean", [b])
    state = cluster.wait_for_leader("unclean", 0, exclude=[a], timeout=60)
    assert state.leader == b
    _produce_values(cluster.bootstrap([b]), "unclean", range(200, 205))
    cluster.start_broker(a)
    cluster.wait_until_isr("unclean", 0, [a, b], timeout=60)
    hw = _check_all_replicas(cluster, "unclean")
    assert hw == 15
    values = [v for _, v in read_partition(cluster.bootstrap(), "unclean", 0, hw)]
    assert values == [*range(10), *range(200, 205)]
    epochs = cluster.epoch_entries(a, "unclean", 0)
    assert [start for _, start in epochs][-1] == 10, epochs
