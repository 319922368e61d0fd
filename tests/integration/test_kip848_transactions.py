"""Exactly-once with a KIP-848 consumer group on a real broker: a confluent-kafka
consumer with ``group.protocol=consumer`` reads, a transactional producer sends the
consumer's positions with ``send_offsets_to_transaction`` and commits, and the offsets
become the group's. librdkafka's group metadata carries the member id and the member
epoch (as the generation), which the broker checks as Kafka 4 does; over the wire,
TxnOffsetCommit v3 with an epoch the member does not have is ILLEGAL_GENERATION, from a
member the group does not know UNKNOWN_MEMBER_ID, and nothing of a refused or aborted
commit reaches the group's offsets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kio.schema.errors import ErrorCode

from support.broker import BrokerProcess
from support.clients import create_topic, wait_until
from support.wire import WireClient
from tiercel.protocol.entities import build_entity, request_class

PARTITIONS = 3
PER_PARTITION = 4
GROUP = "kip848-eos"
SOURCE = "kip848-in"
SINK = "kip848-out"


def request(bootstrap: str, api_key: int, version: int, values: dict[str, Any]) -> Any:
    with WireClient(bootstrap) as client:
        return client.request(
            build_entity(request_class(api_key, version), values, fill_missing=True)
        )


def retried(bootstrap: str, api_key: int, version: int, values: dict[str, Any]) -> Any:
    """The request, again while its coordinator loads or is not known yet."""
    for _ in range(100):
        response = request(bootstrap, api_key, version, values)
        if response.error_code not in (
            ErrorCode.coordinator_load_in_progress,
            ErrorCode.coordinator_not_available,
            ErrorCode.not_coordinator,
            ErrorCode.concurrent_transactions,
        ):
            return response
        time.sleep(0.1)
    raise AssertionError(f"API {api_key} kept failing: {response.error_code}")


def committed_offsets(bootstrap: str) -> list[int]:
    """The group's committed offsets of SOURCE, read by an admin-like fetch (no member)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        tps = [CTopicPartition(SOURCE, p) for p in range(PARTITIONS)]
        return [tp.offset for tp in consumer.committed(tps, timeout=10)]
    finally:
        consumer.close()


def transaction_state(bootstrap: str, transactional_id: str) -> str | None:
    """DescribeTransactions' state of the id (None while the coordinator answers an
    error)."""
    response = request(bootstrap, 65, 0, {"transactional_ids": [transactional_id]})
    state = response.transaction_states[0]
    return str(state.transaction_state) if state.error_code == ErrorCode.none else None


def is_complete_abort(bootstrap: str) -> bool:
    return transaction_state(bootstrap, "kip848-wire") == "CompleteAbort"


def read_everything(consumer: Consumer, count: int) -> list[Any]:
    seen: list[Any] = []
    deadline = time.monotonic() + 30
    while len(seen) < count and time.monotonic() < deadline:
        seen += [m for m in consumer.consume(count, 0.5) if m.error() is None]
    return seen


def test_send_offsets_to_transaction_with_a_kip848_consumer(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    bootstrap = broker_factory().bootstrap
    create_topic(bootstrap, SOURCE, PARTITIONS)
    create_topic(bootstrap, SINK, PARTITIONS)
    source = Producer({"bootstrap.servers": bootstrap})
    for i in range(PARTITIONS * PER_PARTITION):
        source.produce(SOURCE, f"in{i}".encode(), partition=i % PARTITIONS)
    assert source.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([SOURCE])
        seen = read_everything(consumer, PARTITIONS * PER_PARTITION)
        assert len(seen) == PARTITIONS * PER_PARTITION
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": "kip848-app", "linger.ms": 5}
        )
        producer.init_transactions(20)
        producer.begin_transaction()
        for m in seen:
            producer.produce(SINK, m.value().replace(b"in", b"out"), partition=m.partition())
        positions = consumer.position(consumer.assignment())
        assert sorted(tp.offset for tp in positions) == [PER_PARTITION] * PARTITIONS
        # Refused, this would raise: the broker checks the member id and epoch in it.
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 10)
        producer.commit_transaction(20)
        assert wait_until(
            lambda: committed_offsets(bootstrap) == [PER_PARTITION] * PARTITIONS, 15
        ), committed_offsets(bootstrap)

        # The same member over the wire, with the epoch the broker gave it.
        [described] = request(bootstrap, 69, 0, {"group_ids": [GROUP]}).groups
        [member] = described.members
        assert member.member_id == consumer.memberid()
        init = retried(
            bootstrap,
            22,
            4,
            {
                "transactional_id": "kip848-wire",
                "transaction_timeout": 60000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        txn = {
            "transactional_id": "kip848-wire",
            "producer_id": init.producer_id,
            "producer_epoch": init.producer_epoch,
        }
        added = retried(bootstrap, 25, 3, {**txn, "group_id": GROUP})
        assert added.error_code == ErrorCode.none

        def txn_commit(member_id: str, generation_id: int) -> ErrorCode:
            response = request(
                bootstrap,
                28,
                3,
                {
                    **txn,
                    "group_id": GROUP,
                    "generation_id": generation_id,
                    "member_id": member_id,
                    "group_instance_id": None,
                    "topics": [
                        {"name": SOURCE, "partitions": [
                            {"partition_index": 0, "committed_offset": 1}
                        ]}
                    ],
                },
            )  # fmt: skip
            [topic] = response.topics
            [partition] = topic.partitions
            return ErrorCode(partition.error_code)

        assert txn_commit(member.member_id, member.member_epoch - 1) == (
            ErrorCode.illegal_generation
        )
        assert txn_commit(member.member_id, member.member_epoch + 1) == (
            ErrorCode.illegal_generation
        )
        assert txn_commit("stranger", member.member_epoch) == ErrorCode.unknown_member_id
        assert txn_commit(member.member_id, member.member_epoch) == ErrorCode.none
        ended = retried(bootstrap, 26, 3, {**txn, "committed": False})
        assert ended.error_code == ErrorCode.none
        # Once the abort's markers are written, the aborted commit is gone for good.
        assert wait_until(lambda: is_complete_abort(bootstrap), 10)
        assert committed_offsets(bootstrap) == [PER_PARTITION] * PARTITIONS
    finally:
        consumer.close()
