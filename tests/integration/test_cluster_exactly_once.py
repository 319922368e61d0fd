"""Exactly-once consume-transform-produce survives broker crashes (issue 12 item 6).

Three brokers of the example cluster; input and output topics of three partitions,
replication factor 3, min.insync.replicas 2; __transaction_state and __consumer_offsets
replicated three times. An input of `RECORDS` records with unique keys is processed by
one `ExactlyOnceLoop` (a read_committed group consumer, a transactional producer, one
transaction per batch with ``send_offsets_to_transaction``). A third of the way in, one
broker is SIGKILLed inside a transaction (its records handed to the producer, its
offsets not yet sent); once the loop has committed more after the failover, the broker
is started again while the loop goes on. Afterwards a read_committed reader of the output
must find every input key exactly once, with its transformed value.

The broker killed holds one role of the loop, the others being placed on other brokers
by choosing the transactional id and the group id (their coordinators are the leaders
of their partitions of the internal topics, FindCoordinator's answer):

- the leader of an output partition (every broker leads one, so every kill interrupts
  the open transaction's batches and the previous transaction's markers),
- the transaction coordinator of the transactional id,
- the group coordinator of the group (TxnOffsetCommit and the group's offsets move),
  killed as the previous transaction's markers are still being written, and a second
  later, when they are all written (the case that trips a librdkafka bug, see
  support.eos_loop),
- both coordinators at once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Final

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from support.cluster import ClusterProcess
from support.eos_loop import ExactlyOnceLoop
from tiercel.server.coordinator.coordinator_partition import partition_for

RECORDS: Final = 3000
PARTITIONS: Final = 3
INPUT: Final = "eos-input"
OUTPUT: Final = "eos-output"
TXN_TOPIC: Final = "__transaction_state"
OFFSETS_TOPIC: Final = "__consumer_offsets"
# Both internal topics get five partitions here (support.cluster sets the offsets
# topic's): 50 partitions times three replicas is a lot of replication for a test.
INTERNAL_PARTITIONS: Final = 5
# The whole loop, failover and restart included, on a loaded 2-core machine.
LOOP_BUDGET_S: Final = 60.0
TOPIC_CONFIG: Final = {"min.insync.replicas": "2"}
_COORDINATOR_MOVING: Final = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError._TIMED_OUT,
    }
)


def key_of(i: int) -> bytes:
    return b"key-%05d" % i


def transform(value: bytes) -> bytes:
    return b"processed-" + value


@pytest.fixture
def cluster(cluster_factory: Callable[..., ClusterProcess]) -> ClusterProcess:
    return cluster_factory(
        overrides={
            "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
            "transaction.state.log.replication.factor": 3,
            "transaction.state.log.min.isr": 2,
            "offsets.topic.replication.factor": 3,
        }
    )


def produce_input(bootstrap: str) -> dict[int, int]:
    """RECORDS keyed records, idempotent and acks=all; the end offset per partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    ends: dict[int, int] = {}

    def delivered(error: object, message: object) -> None:
        assert error is None, error
        partition = message.partition()  # type: ignore[attr-defined]
        ends[partition] = max(ends.get(partition, 0), message.offset() + 1)  # type: ignore[attr-defined]

    for i in range(RECORDS):
        producer.produce(INPUT, b"value-%05d" % i, key_of(i), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert sum(ends.values()) == RECORDS
    return ends


def create_internal_topics(cluster: ClusterProcess) -> None:
    """FindCoordinator creates the internal topics on first use: a warm-up transactional
    producer and group lookup do, and every partition then gets its leader and ISR, so
    that the coordinators of the ids the test picks can be read from the metadata."""
    warmup = Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": "warmup"})
    warmup.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "warmup"})
    deadline = time.monotonic() + 30
    while True:
        try:
            consumer.committed([CTopicPartition(INPUT, 0)], timeout=10)
            break
        except KafkaException as e:
            # The new partition's leader may not have taken its leadership when
            # FindCoordinator names it (NOT_COORDINATOR), which librdkafka hands back.
            moving = e.args[0].code() in _COORDINATOR_MOVING or e.args[0].retriable()
            if not moving or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    consumer.close()
    for topic in (TXN_TOPIC, OFFSETS_TOPIC):
        for partition in range(INTERNAL_PARTITIONS):
            cluster.wait_for_leader(topic, partition)
            cluster.wait_until_isr(topic, partition, cluster.brokers)


def pick_id(
    cluster: ClusterProcess, prefix: str, topic: str, want: Callable[[int], bool]
) -> tuple[str, int]:
    """The first ``<prefix>-<n>`` whose partition of ``topic`` has a leader ``want``
    accepts: (id, its coordinator)."""
    for n in range(100):
        candidate = f"{prefix}-{n}"
        leader = cluster.leader_of(topic, partition_for(candidate, INTERNAL_PARTITIONS))
        if want(leader):
            return candidate, leader
    raise AssertionError(f"no {prefix} id has a coordinator as wanted")


def read_output(bootstrap: str) -> list[tuple[bytes, bytes]]:
    """Every committed output record (key, value), until RECORDS are read and nothing
    more comes for a second (so duplicates beyond RECORDS are seen too)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-checker",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    records: list[tuple[bytes, bytes]] = []
    try:
        consumer.assign([CTopicPartition(OUTPUT, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        quiet_until: float | None = None
        while time.monotonic() < deadline and (
            quiet_until is None or time.monotonic() < quiet_until
        ):
            batch = consumer.consume(500, 0.2)
            for message in batch:
                assert message.error() is None, message.error()
                records.append((message.key(), message.value()))
            if len(records) >= RECORDS and (batch or quiet_until is None):
                quiet_until = time.monotonic() + 1.0
    finally:
        consumer.close()
    return records


def assert_exactly_once(records: list[tuple[bytes, bytes]], context: str) -> None:
    counts = Counter(key for key, _ in records)
    expected = {key_of(i): transform(b"value-%05d" % i) for i in range(RECORDS)}
    missing = sorted(k for k in expected if k not in counts)
    duplicated = sorted((k, n) for k, n in counts.items() if n > 1)
    unexpected = sorted(k for k in counts if k not in expected)
    wrong = sorted(k for k, v in records if k in expected and v != expected[k])
    assert not (missing or duplicated or unexpected or wrong), (
        f"{len(records)} output records for {RECORDS} inputs: "
        f"{len(missing)} missing {missing[:20]}, {len(duplicated)} duplicated "
        f"{duplicated[:20]}, unexpected keys {unexpected[:10]}, wrong values {wrong[:10]}"
        f"\n{context}"
    )


def place_roles(cluster: ClusterProcess, role: str) -> tuple[str, str, int]:
    """(transactional id, group id, the broker to kill) such that the broker holds
    ``role`` and, unless the role says otherwise, neither coordinator."""
    if role == "transaction coordinator":
        transactional_id, victim = pick_id(cluster, "eos-app", TXN_TOPIC, lambda _: True)
        group_id, _ = pick_id(cluster, "eos-group", OFFSETS_TOPIC, lambda n: n != victim)
    elif role == "both coordinators":
        transactional_id, victim = pick_id(cluster, "eos-app", TXN_TOPIC, lambda _: True)
        group_id, _ = pick_id(cluster, "eos-group", OFFSETS_TOPIC, lambda n: n == victim)
    elif role == "group coordinator":
        group_id, victim = pick_id(cluster, "eos-group", OFFSETS_TOPIC, lambda _: True)
        transactional_id, _ = pick_id(cluster, "eos-app", TXN_TOPIC, lambda n: n != victim)
    else:
        victim = cluster.leader_of(OUTPUT, 0)
        transactional_id, _ = pick_id(cluster, "eos-app", TXN_TOPIC, lambda n: n != victim)
        group_id, _ = pick_id(cluster, "eos-group", OFFSETS_TOPIC, lambda n: n != victim)
    return transactional_id, group_id, victim


def run_with_crash(cluster: ClusterProcess, role: str, settle_s: float) -> None:
    for topic in (INPUT, OUTPUT):
        cluster.create_topic(topic, PARTITIONS, replication_factor=3, config=TOPIC_CONFIG)
    ends = produce_input(cluster.bootstrap())
    create_internal_topics(cluster)
    output_leaders = {cluster.leader_of(OUTPUT, p) for p in range(PARTITIONS)}
    transactional_id, group_id, victim = place_roles(cluster, role)
    assert victim in output_leaders  # it interrupts output batches whatever its role

    loop = ExactlyOnceLoop(
        cluster.bootstrap(), INPUT, OUTPUT, group_id, transactional_id, transform
    )
    started = time.monotonic()
    deadline = started + LOOP_BUDGET_S
    events: list[str] = []
    restarter: threading.Thread | None = None
    restart_errors: list[BaseException] = []

    def restart() -> None:
        try:
            cluster.brokers[victim].start(60)
        except BaseException as e:  # reported by the test thread
            restart_errors.append(e)

    def inside() -> None:
        nonlocal restarter
        done = loop.report.records_committed
        if not events and done >= RECORDS // 3:
            # settle_s 0: the previous transaction's markers are still being written;
            # later, they are all written and the open transaction is all there is.
            time.sleep(settle_s)
            cluster.kill(victim)
            events.append(f"{time.monotonic() - started:.1f}s killed broker {victim} ({role})")
        elif len(events) == 1 and done >= RECORDS // 3 + 300:
            # The loop committed past the failover; the broker comes back as the loop
            # goes on (its restart runs beside it, as an operator's would).
            events.append(f"{time.monotonic() - started:.1f}s restarting broker {victim}")
            restarter = threading.Thread(target=restart, daemon=True)
            restarter.start()

    def done(committed: Mapping[int, int]) -> bool:
        return all(committed.get(p, 0) >= end for p, end in ends.items())

    loop.init(deadline)
    try:
        loop.run(done, deadline, inside)
    except BaseException:
        print("\n".join(events))
        raise
    events.append(f"{time.monotonic() - started:.1f}s loop done")
    loop.close()
    context = "\n".join(events) + "\n" + loop.report.summary()
    print(context)
    if restarter is not None:
        restarter.join(60)
    assert not restart_errors, restart_errors
    assert len(events) == 3, context  # killed, restarted, done
    cluster.wait_for_brokers(cluster.brokers)
    assert_exactly_once(read_output(cluster.bootstrap()), context)


@pytest.mark.parametrize(
    ("role", "settle_s"),
    [
        ("output partition leader", 0.0),
        ("transaction coordinator", 0.0),
        # The case of librdkafka's coordinator lookup that never wakes up (see
        # support.eos_loop): send_offsets_to_transaction starts at once, its lookup
        # finds the dead broker, which then leaves the metadata.
        ("group coordinator", 1.0),
        # The group coordinator also fails over here, killed with no delay.
        ("both coordinators", 0.0),
    ],
)
def test_exactly_once_survives_a_broker_crash(
    cluster: ClusterProcess, role: str, settle_s: float
) -> None:
    run_with_crash(cluster, role, settle_s)
