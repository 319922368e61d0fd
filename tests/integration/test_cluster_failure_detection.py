"""Failure detection on the default timeouts, and broker incarnations (broker epochs).

ZooKeeper runs with its default tickTime (2 s), as a deployment's would: it expires
sessions on tick boundaries, up to one tick late, and that lateness is part of the
detection time. The brokers run on their config files' `zookeeper.session.timeout.ms`
(6 s, the default). Each test prints what it measured.

- A SIGKILLed leader's partition takes acks=all writes again within 10 s (KRaft's
  `broker.session.timeout.ms` is 9 s; the leader election and the client's metadata
  refresh and retry are inside that budget).
- A broker stopped for half the timeout is not declared dead: no leader change, the
  same registration (broker epoch).
- A broker SIGKILLed and restarted at once is a new incarnation, as Kafka's
  KafkaController.processBrokerChange sees a bounced broker: its leaderships move with
  a new leader epoch, it registers with a new broker epoch and rejoins the ISR.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from support.cluster import ClusterProcess
from support.sequence_producer import SequenceProducer, read_partition, verify_sequence
from support.zookeeper import ZooKeeperServer

ClusterFactory = Callable[..., ClusterProcess]
ZooKeeperFactory = Callable[..., ZooKeeperServer]
TOPIC_CONFIG = {"min.insync.replicas": "2"}
# ZooKeeper's own default tickTime.
ZOOKEEPER_TICK_MS = 2000
DETECTION_BUDGET_S = 10.0
# Half the 6 s session timeout: kazoo pings every third of it, so the session has at
# least 4 s of silence left when the process stops.
PAUSE_S = 3.0


def _default_cluster(
    cluster_factory: ClusterFactory, zookeeper_factory: ZooKeeperFactory
) -> ClusterProcess:
    return cluster_factory(zookeeper=zookeeper_factory(ZOOKEEPER_TICK_MS))


def _first_ack_after(producer: SequenceProducer, since: float, timeout: float) -> float:
    producer.wait_for(lambda t: any(at > since for at in t.ack_times.values()), timeout)
    return min(at for at in producer.tally.ack_times.values() if at > since) - since


def test_sigkilled_leader_is_replaced_within_ten_seconds(
    cluster_factory: ClusterFactory, zookeeper_factory: ZooKeeperFactory
) -> None:
    cluster = _default_cluster(cluster_factory, zookeeper_factory)
    cluster.create_topic("detect", config=TOPIC_CONFIG)
    producer = SequenceProducer(cluster.bootstrap(), "detect").start()
    producer.wait_for_acks(500)
    old = cluster.leader_of("detect", 0)
    cluster.kill(old)
    killed_at = time.monotonic()
    failover_s = _first_ack_after(producer, killed_at, timeout=60)
    print(f"leader SIGKILL -> next acknowledged acks=all write: {failover_s:.2f} s")
    assert failover_s <= DETECTION_BUDGET_S
    assert cluster.leader_of("detect", 0) != old
    producer.wait_for_acks(500)
    tally = producer.stop()
    assert not tally.failed, list(tally.failed.items())[:5]


def test_broker_stopped_for_half_the_timeout_is_not_declared_dead(
    cluster_factory: ClusterFactory, zookeeper_factory: ZooKeeperFactory
) -> None:
    cluster = _default_cluster(cluster_factory, zookeeper_factory)
    cluster.create_topic("stall", config=TOPIC_CONFIG)
    producer = SequenceProducer(cluster.bootstrap(), "stall").start()
    producer.wait_for_acks(500)
    leader = cluster.leader_of("stall", 0)
    before = cluster.partition_state("stall", 0)
    epoch = cluster.broker_epoch(leader)
    cluster.pause(leader)
    time.sleep(PAUSE_S)
    cluster.resume(leader)
    _first_ack_after(producer, time.monotonic(), timeout=60)
    # Whatever ZooKeeper would do with an expired session it has done by now.
    time.sleep(ZOOKEEPER_TICK_MS / 1000 * 2)
    after = cluster.partition_state("stall", 0)
    assert before is not None and after is not None
    assert (after.leader, after.leader_epoch) == (before.leader, before.leader_epoch)
    assert cluster.broker_epoch(leader) == epoch
    tally = producer.stop()
    assert not tally.failed, list(tally.failed.items())[:5]


def test_broker_restarted_within_the_timeout_is_a_new_incarnation(
    cluster_factory: ClusterFactory, zookeeper_factory: ZooKeeperFactory
) -> None:
    cluster = _default_cluster(cluster_factory, zookeeper_factory)
    # A partition led by a broker that is not the controller: the controller sees the
    # registration change hands (a new czxid) and handles it as a failure. Were the
    # killed broker the controller too, its successor would read the new registration
    # at failover with no bounce to see, as Kafka's ZooKeeper-mode controller would,
    # and the test's outcome would hang on which came first.
    cluster.create_topic("bounce", partitions=3, config=TOPIC_CONFIG)
    controller = cluster.wait_for_controller()
    partition = next(p for p in range(3) if cluster.leader_of("bounce", p) != controller)
    producer = SequenceProducer(cluster.bootstrap(), "bounce", partition).start()
    producer.wait_for_acks(500)
    old = cluster.leader_of("bounce", partition)
    before = cluster.partition_state("bounce", partition)
    old_epoch = cluster.broker_epoch(old)
    assert before is not None and old_epoch is not None
    cluster.kill(old)
    killed_at = time.monotonic()
    cluster.brokers[old].start(60)
    # Its partitions are handled as after a failure: a new leader and leader epoch.
    moved = cluster.wait_for_leader("bounce", partition, exclude=[old], timeout=60)
    assert moved.leader_epoch > before.leader_epoch
    cluster.wait_for_brokers([old])
    new_epoch = cluster.broker_epoch(old)
    print(
        f"restarted broker {old}: broker epoch {old_epoch:#x} -> {new_epoch:#x}, "
        f"new leader {moved.leader} (leader epoch {moved.leader_epoch}) "
        f"{time.monotonic() - killed_at:.2f} s after the kill"
    )
    assert new_epoch is not None and new_epoch > old_epoch
    # ... and then as a startup: it follows, truncates if it must, and catches up.
    cluster.wait_until_isr("bounce", partition, cluster.brokers, timeout=60)
    producer.wait_for_acks(500)
    tally = producer.stop()
    assert not tally.failed, list(tally.failed.items())[:5]
    hw = cluster.assert_replicas_identical_below_hw("bounce", partition, timeout=60)
    verify_sequence(read_partition(cluster.bootstrap(), "bounce", partition, hw), tally)
