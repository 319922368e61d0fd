"""Failure detection on the default timeouts, and broker incarnations (broker epochs).

The nodes run on their config files' `broker.heartbeat.interval.ms` (2 s) and
`broker.session.timeout.ms` (9 s), Kafka's defaults: the active controller fences a
broker whose heartbeats have been missing for the session timeout
(BrokerHeartbeatManager), and its leaderships move. Each test prints what it measured.

- A SIGKILLed leader's partition takes acks=all writes again within 10 s (the 9 s
  session, the leader election and the client's metadata refresh and retry are inside
  that budget). The killed node is not the active controller: a new active controller
  gives every broker a whole session first, as Kafka's does (README's failover figures).
- A broker stopped for half the timeout is not declared dead: no leader change, the
  same registration (broker epoch).
- A broker SIGKILLed and restarted at once is a new incarnation: its registration with
  a new incarnation id is refused while the old one's session lives
  (ClusterControlManager.registerBroker's DuplicateBrokerRegistrationException), then
  accepted; its leaderships move with a new leader epoch, it has a new broker epoch
  and rejoins the ISR.
"""

from __future__ import annotations

import time

from support.cluster import ClusterProcess
from support.sequence_producer import SequenceProducer, read_partition, verify_sequence

TOPIC_CONFIG = {"min.insync.replicas": "2"}
DETECTION_BUDGET_S = 10.0
SESSION_TIMEOUT_S = 9.0
# Half the session timeout: with a heartbeat every 2 s, the session has at least 2.5 s
# left when the process resumes.
PAUSE_S = SESSION_TIMEOUT_S / 2


def _led_by_a_broker_not_the_controller(
    cluster: ClusterProcess, topic: str, partitions: int
) -> int:
    """A partition of ``topic`` whose leader is not the active controller's node."""
    controller = cluster.wait_for_controller()
    return next(p for p in range(partitions) if cluster.leader_of(topic, p) != controller)


def _first_ack_after(producer: SequenceProducer, since: float, timeout: float) -> float:
    producer.wait_for(lambda t: any(at > since for at in t.ack_times.values()), timeout)
    return min(at for at in producer.tally.ack_times.values() if at > since) - since


def test_sigkilled_leader_is_replaced_within_ten_seconds(cluster: ClusterProcess) -> None:
    cluster.create_topic("detect", partitions=3, config=TOPIC_CONFIG)
    partition = _led_by_a_broker_not_the_controller(cluster, "detect", 3)
    producer = SequenceProducer(cluster.bootstrap(), "detect", partition).start()
    producer.wait_for_acks(500)
    old = cluster.leader_of("detect", partition)
    cluster.kill(old)
    killed_at = time.monotonic()
    failover_s = _first_ack_after(producer, killed_at, timeout=60)
    print(f"leader SIGKILL -> next acknowledged acks=all write: {failover_s:.2f} s")
    assert failover_s <= DETECTION_BUDGET_S
    assert cluster.leader_of("detect", partition) != old
    producer.wait_for_acks(500)
    tally = producer.stop()
    assert not tally.failed, list(tally.failed.items())[:5]


def test_broker_stopped_for_half_the_timeout_is_not_declared_dead(
    cluster: ClusterProcess,
) -> None:
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
    # Past the moment its session would have expired had the heartbeats not resumed.
    time.sleep(SESSION_TIMEOUT_S - PAUSE_S)
    after = cluster.partition_state("stall", 0)
    assert before is not None and after is not None
    assert (after.leader, after.leader_epoch) == (before.leader, before.leader_epoch)
    assert cluster.broker_epoch(leader) == epoch
    tally = producer.stop()
    assert not tally.failed, list(tally.failed.items())[:5]


def test_broker_restarted_within_the_timeout_is_a_new_incarnation(
    cluster: ClusterProcess,
) -> None:
    cluster.create_topic("bounce", partitions=3, config=TOPIC_CONFIG)
    partition = _led_by_a_broker_not_the_controller(cluster, "bounce", 3)
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
