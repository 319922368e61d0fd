"""Reads across both tiers with a real broker process and real clients (KIP-405): a
topic whose local retention has removed every copied segment is still consumed from
offset 0, every record once and in order, by librdkafka, kafka-python and aiokafka
(the records below the local start come from the remote tier through the reader pool);
ListOffsets answers EARLIEST 0, EARLIEST_LOCAL the local start, LATEST_TIERED the last
remote offset, and a timestamp lookup finds a remote record. A remote first batch larger
than what a local partition left of the response answers no records, as a local one.

Skipped until the broker runs a RemoteLogManager (branch rlm's
``server/remote_log_wiring.py``), which must then hand the ReplicaManager its reads
(``replica_manager.remote_log_manager = RemoteLogReader.create(...)``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Final

import aiokafka
import kafka
import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from support.broker import BrokerProcess
from support.clients import Outgoing, create_topic, now_ms, produce, running_broker, wait_until
from support.wire import WireClient
from tiercel.protocol.record_batch import iter_batches

BROKER_OVERRIDES: Final = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 200,
    "log.retention.check.interval.ms": 200,
}
TOPIC: Final = "tiered-reads"
COUNT: Final = 300
BASE_TS: Final = now_ms() - 3_600_000  # within retention.ms: nothing expires


def value(i: int) -> bytes:
    return b"%05d:" % i + b"r" * 80


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("tiered_reads"), BROKER_OVERRIDES) as broker:
        config = {
            "remote.storage.enable": "true",
            "segment.bytes": "2048",
            "local.retention.bytes": "1",
            "file.delete.delay.ms": "300",
        }
        create_topic(broker.bootstrap, TOPIC, config=config)
        records = [Outgoing(0, value(i), None, (), BASE_TS + i) for i in range(COUNT)]
        delivered = produce(
            "confluent", broker.bootstrap, TOPIC, records, {"batch.num.messages": 3}
        )
        assert [d.offset for d in delivered] == list(range(COUNT))
        assert wait_until(lambda: earliest_local(broker) > COUNT // 2, 30)
        yield broker


def list_offset(broker: BrokerProcess, spec: int, topic: str = TOPIC) -> tuple[int, int | None]:
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        tp = kafka.TopicPartition(topic, 0)
        found = admin.list_partition_offsets({tp: spec})[tp]
        return found.offset, found.leader_epoch
    finally:
        admin.close()


def earliest_local(broker: BrokerProcess) -> int:
    return list_offset(broker, kafka.OffsetSpec.EARLIEST_LOCAL)[0]


def test_list_offsets_across_tiers(broker: BrokerProcess) -> None:
    local_start = earliest_local(broker)
    assert list_offset(broker, kafka.OffsetSpec.EARLIEST)[0] == 0
    tiered, epoch = list_offset(broker, kafka.OffsetSpec.LATEST_TIERED)
    assert local_start - 1 <= tiered < COUNT and epoch == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tiered-times"})
    try:
        (found,) = consumer.offsets_for_times([TopicPartition(TOPIC, 0, BASE_TS + 7)], 10)
    finally:
        consumer.close()
    assert found.offset == 7  # a remote record


def test_librdkafka_reads_every_record_from_offset_0(broker: BrokerProcess) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "tiered-librdkafka",
            "auto.offset.reset": "earliest",
            "max.partition.fetch.bytes": 1024,
        }
    )
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + 60
        while len(got) < COUNT and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert got == [(i, value(i)) for i in range(COUNT)]


def test_kafka_python_reads_every_record_from_offset_0(broker: BrokerProcess) -> None:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=1024,
    )
    tp = kafka.TopicPartition(TOPIC, 0)
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        for _ in range(120):
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((r.offset, r.value) for r in records)
            if len(got) >= COUNT:
                break
    finally:
        consumer.close()
    assert got == [(i, value(i)) for i in range(COUNT)]


def test_aiokafka_reads_every_record_from_offset_0(broker: BrokerProcess) -> None:
    async def consume() -> list[tuple[int, bytes]]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, max_partition_fetch_bytes=1024
        )
        tp = aiokafka.TopicPartition(TOPIC, 0)
        await consumer.start()
        got: list[tuple[int, bytes]] = []
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            deadline = time.monotonic() + 60
            while len(got) < COUNT and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    got.extend((r.offset, r.value) for r in records)
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(consume()) == [(i, value(i)) for i in range(COUNT)]


def fetch_from_0(topics: list[str], max_bytes: int) -> FetchRequest:
    """A consumer's Fetch v12 of partition 0 of each topic, in order, from offset 0."""
    return FetchRequest(
        replica_id=i32(-1),
        max_wait=i32Timedelta.parse(timedelta(milliseconds=0)),
        min_bytes=i32(1), max_bytes=i32(max_bytes), isolation_level=i8(0),
        session_id=i32(0), session_epoch=i32(-1),
        topics=tuple(
            FetchTopic(topic=TopicName(topic), partitions=(
                FetchPartition(partition=i32(0), current_leader_epoch=i32(-1),
                               fetch_offset=i64(0), last_fetched_epoch=i32(-1),
                               log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),
            ))
            for topic in topics
        ),
        forgotten_topics_data=(), rack_id="",
    )  # fmt: skip


def test_a_remote_first_batch_that_does_not_fit_what_is_left_answers_no_records(
    broker: BrokerProcess,
) -> None:
    """Before, the remote read returned the ~20 KB a local partition left of a 50,000-byte
    response: a fragment of the remote 100 KB batch, no complete record in it."""
    local, remote = "cut-local", "cut-remote"
    create_topic(broker.bootstrap, local)
    tiered = {
        "remote.storage.enable": "true",
        "segment.bytes": "110000",
        "local.retention.bytes": "1",
        "file.delete.delay.ms": "300",
    }
    create_topic(broker.bootstrap, remote, config=tiered)
    produce("confluent", broker.bootstrap, local, [Outgoing(0, bytes(10_000))] * 3)
    # The big batch fills a segment of its own: the next one does not fit beside it.
    for value in (bytes(100_000), bytes(20_000)):
        produce("confluent", broker.bootstrap, remote, [Outgoing(0, value)])
    assert wait_until(lambda: list_offset(broker, -4, remote)[0] == 1, 30)  # remote only
    with WireClient(broker.bootstrap, timeout=30) as client:
        both = client.request(fetch_from_0([local, remote], 50_000))
        alone = client.request(fetch_from_0([remote], 50_000))
    answers = {str(t.topic): t.partitions[0] for t in both.responses}
    assert sum(h.records_count for _, h in iter_batches(answers[local].records)) == 3
    assert answers[remote].error_code == 0 and answers[remote].records in (b"", None)
    # First in its response, the remote batch comes whole (KIP-74).
    (batch,) = [h for _, h in iter_batches(alone.responses[0].partitions[0].records)]
    assert batch.base_offset == 0 and batch.size_in_bytes > 100_000
