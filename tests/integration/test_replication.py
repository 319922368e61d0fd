"""Replication between three combined KRaft nodes (tests/support/cluster.py).

A topic with three replicas takes acks=all writes from librdkafka; the followers fetch
them with real Fetch requests; consumers read them back; and every replica's segment
files hold the same bytes below the high watermark. A follower asked as if it were the
leader answers NOT_LEADER_OR_FOLLOWER with the leader's id, epoch and address (KIP-951).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from support.broker import BrokerProcess
from support.clients import consume
from support.cluster import ClusterProcess, read_batches
from support.wire import WireClient
from tiercel.protocol.entities import build_entity, request_class
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch

TOPIC = "replicated"
PARTITIONS = 2
RECORDS = 3000


def _wait(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _leaders(bootstrap: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, ISR) as a broker's Metadata reports them."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
    topic = metadata.topics[TOPIC]
    if topic.error is not None:
        return {}
    return {p: (m.leader, sorted(m.isrs)) for p, m in topic.partitions.items()}


def _produce(bootstrap: str) -> dict[int, list[bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    errors: list[str] = []

    def on_delivery(err: object, msg: Message) -> None:
        if err is not None:
            errors.append(str(err))
            return
        partition, offset, value = msg.partition(), msg.offset(), msg.value()
        assert partition is not None and offset is not None and value is not None
        acked[partition].append((offset, value))

    for i in range(RECORDS):
        producer.produce(
            TOPIC, b"value-%05d" % i, partition=i % PARTITIONS, on_delivery=on_delivery
        )
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors, errors[:5]
    for partition, records in acked.items():
        assert [offset for offset, _ in records] == list(range(len(records))), partition
    return {p: [value for _, value in records] for p, records in acked.items()}


def _consume(bootstrap: str, expected: dict[int, list[bytes]]) -> None:
    consumed = consume("confluent", bootstrap, TOPIC, RECORDS, range(PARTITIONS), timeout=30)
    got = {p: [r.value for r in records] for p, records in consumed.by_partition().items()}
    assert got == expected


def _partition_dir(broker: BrokerProcess, partition: int) -> Path:
    return broker.log_dir / f"{TOPIC}-{partition}"


def _bytes_below(broker: BrokerProcess, partition: int, high_watermark: int) -> bytes | None:
    """The replica's batches below ``high_watermark``; None until it has them all."""
    batches = [
        b for b in read_batches(_partition_dir(broker, partition)) if b.base_offset < high_watermark
    ]
    if not batches or batches[-1].last_offset < high_watermark - 1:
        return None
    return b"".join(b.data for b in batches)


def _all_led(bootstrap: str) -> dict[int, tuple[int, list[int]]] | None:
    leaders = _leaders(bootstrap)
    led = len(leaders) == PARTITIONS and all(leader >= 0 for leader, _ in leaders.values())
    return leaders if led else None


def _replicas_below(
    brokers: dict[int, BrokerProcess], partition: int, high_watermark: int
) -> dict[int, bytes] | None:
    replicas = {}
    for node, broker in brokers.items():
        data = _bytes_below(broker, partition, high_watermark)
        if data is None:
            return None
        replicas[node] = data
    return replicas


def test_three_replicas_hold_the_same_bytes_below_the_hw(
    cluster_factory: Callable[..., ClusterProcess],
) -> None:
    brokers = cluster_factory(overrides={"offsets.topic.num.partitions": 1}).brokers
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], operation_timeout=20)[TOPIC].result(30)
    leaders = _wait(lambda: _all_led(bootstrap), 30, "a leader for every partition")

    produced = _produce(bootstrap)
    _consume(brokers[2].bootstrap, produced)

    for partition in range(PARTITIONS):
        high_watermark = len(produced[partition])
        replicas = _wait(
            lambda p=partition, hw=high_watermark: _replicas_below(brokers, p, hw),
            30,
            f"every replica of partition {partition} to reach the HW",
        )
        assert replicas[1] == replicas[2] == replicas[3], f"partition {partition} differs"
    # Every follower fetched its way into the ISR.
    _wait(
        lambda: all(isr == [1, 2, 3] for _, isr in _leaders(bootstrap).values()),
        30,
        "full ISRs",
    )

    # KIP-951: a follower names the leader, with its address, in NOT_LEADER_OR_FOLLOWER.
    leader, _ = leaders[0]
    follower = next(n for n in brokers if n != leader)
    with WireClient(brokers[follower].bootstrap) as wire:
        fetch = wire.request(_fetch_v16(_topic_id(wire), partition=0))
        produce = wire.request(_produce_v10(partition=0))
    (fetched,) = fetch.responses[0].partitions
    assert fetched.error_code == ErrorCode.not_leader_or_follower
    assert fetched.current_leader.leader_id == leader
    assert fetched.current_leader.leader_epoch >= 0
    assert [(e.node_id, e.port) for e in fetch.node_endpoints] == [(leader, brokers[leader].port)]
    (produced_to,) = produce.responses[0].partition_responses
    assert produced_to.error_code == ErrorCode.not_leader_or_follower
    assert produced_to.current_leader.leader_id == leader
    assert [(e.node_id, e.port) for e in produce.node_endpoints] == [(leader, brokers[leader].port)]


def _topic_id(wire: WireClient) -> Any:
    metadata = wire.request(
        build_entity(
            request_class(3, 12),
            {
                "topics": [{"name": TOPIC}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
    )
    return metadata.topics[0].topic_id


def _fetch_v16(topic_id: Any, partition: int) -> Any:
    return build_entity(
        request_class(1, 16),
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )


def _produce_v10(partition: int) -> Any:
    records = build_record_batch(
        [SimpleRecord(None, b"to a follower", timestamp=int(time.time() * 1000))]
    )
    return build_entity(
        request_class(0, 10),
        {
            "transactional_id": None,
            "acks": 1,
            "timeout": 5000,
            "topic_data": [
                {"name": TOPIC, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
