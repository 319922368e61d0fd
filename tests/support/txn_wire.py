"""Driving the partition side of transactions on the wire, as a transaction coordinator
and its producers would: idempotent producer ids (InitProducerId without a
transactional id) writing transactional batches, WriteTxnMarkers ending them, and
read_committed reads (Fetch, ListOffsets, a librdkafka consumer).

The transaction coordinator never hears of these transactions, so a broker serving
them must not verify transactional writes with it (KIP-890 part 1): start it with
`HAND_COORDINATOR_OVERRIDES`. Transactional records still name a transactional id, as
Kafka requires (TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise)."""

from __future__ import annotations

import datetime
import time
from typing import Any, Final

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from kio.schema.errors import ErrorCode

from support.clients import now_ms
from support.wire import WireClient
from tiercel.protocol.entities import build_entity, request_class
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch

# The tests play the coordinator: the broker's own one must not be asked.
HAND_COORDINATOR_OVERRIDES: Final = {"transaction.partition.verification.enable": "false"}
WIRE_TRANSACTIONAL_ID: Final = "txn-wire"


def request(client: WireClient, api_key: int, version: int, values: dict[str, Any]) -> Any:
    return client.request(build_entity(request_class(api_key, version), values, fill_missing=True))


def init_producer_id(client: WireClient) -> tuple[int, int]:
    response = request(
        client,
        22,
        4,
        {"transactional_id": None, "transaction_timeout": datetime.timedelta(seconds=60)},
    )
    assert response.error_code == ErrorCode.none
    return int(response.producer_id), int(response.producer_epoch)


class TxnProducer:
    """An idempotent producer id writing transactional batches to one partition."""

    def __init__(self, client: WireClient, topic: str, epoch: int | None = None) -> None:
        self.client = client
        self.topic = topic
        self.producer_id, self.epoch = init_producer_id(client)
        if epoch is not None:
            self.epoch = epoch
        self.seq = 0

    def send(self, *values: bytes, transactional: bool = True) -> tuple[ErrorCode, int]:
        batch = build_record_batch(
            [SimpleRecord(b"k", v, timestamp=now_ms()) for v in values],
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=transactional,
        )
        part = produce(self.client, self.topic, batch)
        if part.error_code == ErrorCode.none:
            self.seq += len(values)
        return part.error_code, int(part.base_offset)

    def end(self, commit: bool, coordinator_epoch: int = 0, epoch: int | None = None) -> ErrorCode:
        return write_marker(
            self.client,
            self.producer_id,
            self.epoch if epoch is None else epoch,
            commit,
            coordinator_epoch,
            {self.topic: [0]},
        )[(self.topic, 0)]


def produce(client: WireClient, topic: str, batch: bytes) -> Any:
    response = request(
        client,
        0,
        9,
        {
            "transactional_id": WIRE_TRANSACTIONAL_ID,
            "acks": -1,
            "timeout": datetime.timedelta(seconds=10),
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    return response.responses[0].partition_responses[0]


def plain(client: WireClient, topic: str, *values: bytes) -> int:
    batch = build_record_batch([SimpleRecord(b"k", v, timestamp=now_ms()) for v in values])
    part = produce(client, topic, batch)
    assert part.error_code == ErrorCode.none
    return int(part.base_offset)


def write_marker(
    client: WireClient,
    producer_id: int,
    epoch: int,
    commit: bool,
    coordinator_epoch: int,
    partitions: dict[str, list[int]],
) -> dict[tuple[str, int], ErrorCode]:
    response = request(
        client,
        27,
        1,
        {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": epoch,
                    "transaction_result": commit,
                    "coordinator_epoch": coordinator_epoch,
                    "topics": [
                        {"name": name, "partition_indexes": indexes}
                        for name, indexes in partitions.items()
                    ],
                }
            ]
        },
    )
    (marker,) = response.markers
    assert marker.producer_id == producer_id
    return {
        (topic.name, p.partition_index): p.error_code
        for topic in marker.topics
        for p in topic.partitions
    }


def fetch_committed(client: WireClient, topic: str, offset: int) -> Any:
    response = request(
        client,
        1,
        12,
        {
            "max_wait": datetime.timedelta(milliseconds=10),
            "min_bytes": 1,
            "isolation_level": 1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": 0,
                            "fetch_offset": offset,
                            "partition_max_bytes": 1 << 20,
                            "current_leader_epoch": -1,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                        }
                    ],
                }
            ],
        },
    )
    return response.responses[0].partitions[0]


def latest_offset(client: WireClient, topic: str, isolation_level: int) -> int:
    response = request(
        client,
        2,
        7,
        {
            "replica_id": -1,
            "isolation_level": isolation_level,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    part = response.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return int(part.offset)


def consume_confluent(
    bootstrap: str, topic: str, isolation: str, expect: int, timeout: float = 15.0
) -> list[bytes]:
    """The values of partition 0 from offset 0 with librdkafka at ``isolation``: once
    ``expect`` arrived, what more comes within a second; else all within ``timeout``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"txn-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([CTopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        settle: float | None = None
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            for msg in consumer.consume(100, 0.2):
                assert msg.error() is None, msg.error()
                values.append(msg.value())
            if settle is None and len(values) >= expect:
                settle = time.monotonic() + 1.0
    finally:
        consumer.close()
    return values
