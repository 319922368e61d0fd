"""Record-level produce errors (KIP-467) on a real broker, seen by every client.

A keyless record sent to a compacted topic, or a record whose timestamp is out of the
topic's window, fails its whole batch — nothing is appended — and Produce v8+ names the
culprit: ``record_errors`` carries its batch index and Kafka's message, and
``error_message`` says why the batch failed. Clients act on that as they do with
Kafka: kafka-python fails the culprit with the broker's error and the rest of the batch
with its "part of a batch which had one more more invalid records"; librdkafka 2.16
fails the culprits with INVALID_RECORD and, when there are several, the others with its
local _INVALID_DIFFERENT_RECORD (with one culprit it fails every record with
INVALID_RECORD); aiokafka has no class for error 87 and fails the batch with its
UnknownError.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterator, Sequence
from typing import Any, Final

import aiokafka
import kafka
import pytest
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.schema.produce.v8.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from support.broker import BrokerProcess
from support.clients import create_topic, running_broker, watermarks
from support.wire import WireClient
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch

COMPACTED: Final = "compacted"
RECENT: Final = "recent-only"  # accepts timestamps up to an hour old
WINDOW_MS: Final = 3_600_000
NO_KEY: Final = "Compacted topic cannot accept message without key in topic partition"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("record-errors")) as started:
        create_topic(started.bootstrap, COMPACTED, config={"cleanup.policy": "compact"})
        create_topic(
            started.bootstrap, RECENT, config={"message.timestamp.before.max.ms": str(WINDOW_MS)}
        )
        yield started


def now_ms() -> int:
    return int(time.time() * 1000)


def wire_produce(broker: BrokerProcess, topic: str, batch: bytes) -> Any:
    """One batch to partition 0 with Produce v8, acks=all; the partition's response."""
    request = ProduceRequest(
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=(PartitionProduceData(index=i32(0), records=Records(batch)),),
            ),
        ),
    )
    with WireClient(broker.bootstrap) as client:
        response = client.request(request)
    (partition,) = response.responses[0].partition_responses
    return partition


def test_produce_v8_names_the_keyless_record(broker: BrokerProcess) -> None:
    batch = build_record_batch(
        [SimpleRecord(k, b"v", timestamp=now_ms()) for k in (b"a", b"b", None, b"d")]
    )
    partition = wire_produce(broker, COMPACTED, batch)
    assert partition.error_code == ErrorCode.invalid_record
    assert partition.base_offset == -1
    ((index, message),) = [
        (e.batch_index, e.batch_index_error_message) for e in partition.record_errors
    ]
    assert (index, message) == (2, f"{NO_KEY} {COMPACTED}-0")
    assert partition.error_message == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=2, message='{message}')]"
    )
    assert watermarks(broker.bootstrap, COMPACTED) == (0, 0)


def test_produce_v8_names_the_records_with_timestamps_out_of_the_window(
    broker: BrokerProcess,
) -> None:
    now = now_ms()
    batch = build_record_batch(
        [SimpleRecord(b"k", b"v", timestamp=t) for t in (now, now - 2 * WINDOW_MS, now)]
    )
    partition = wire_produce(broker, RECENT, batch)
    assert partition.error_code == ErrorCode.invalid_timestamp
    assert partition.error_message == (
        "One or more records have been rejected due to invalid timestamp"
    )
    ((index, message),) = [
        (e.batch_index, e.batch_index_error_message) for e in partition.record_errors
    ]
    assert index == 1
    assert message.startswith(f"Timestamp {now - 2 * WINDOW_MS} of message with offset 1 ")
    assert watermarks(broker.bootstrap, RECENT) == (0, 0)


def confluent_produce(broker: BrokerProcess, keys: Sequence[bytes | None]) -> list[int]:
    """One batch of ``keys`` through librdkafka; the error code of each delivery."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 200})
    codes: dict[int, int] = {}

    def report(index: int) -> Any:
        def on_delivery(err: Any, msg: Any) -> None:
            codes[index] = ConfluentError.NO_ERROR if err is None else err.code()

        return on_delivery

    for i, key in enumerate(keys):
        producer.produce(COMPACTED, value=b"v%d" % i, key=key, partition=0, on_delivery=report(i))
    assert producer.flush(20) == 0
    return [codes[i] for i in range(len(keys))]


def test_librdkafka_fails_the_culprits_with_invalid_record(broker: BrokerProcess) -> None:
    invalid, different = ConfluentError.INVALID_RECORD, ConfluentError._INVALID_DIFFERENT_RECORD
    # Two culprits: librdkafka tells them from the records that merely shared the batch.
    codes = confluent_produce(broker, [b"a", None, b"c", None])
    assert codes == [different, invalid, different, invalid]
    # One culprit: librdkafka 2.16 fails every record of the batch with INVALID_RECORD.
    assert confluent_produce(broker, [b"a", b"b", None, b"d"]) == [invalid] * 4
    assert watermarks(broker.bootstrap, COMPACTED) == (0, 0)


def test_kafka_python_fails_the_culprit_with_the_brokers_message(broker: BrokerProcess) -> None:
    producer = kafka.KafkaProducer(
        bootstrap_servers=broker.bootstrap, acks="all", linger_ms=200, retries=0
    )
    try:
        futures = [
            producer.send(COMPACTED, value=b"v", key=key, partition=0) for key in (b"a", None, b"c")
        ]
        producer.flush(20)
        errors = [future.exception for future in futures]
    finally:
        producer.close(5)
    culprit = errors[1]
    assert isinstance(culprit, kafka.errors.InvalidRecordError)
    assert f"{NO_KEY} {COMPACTED}-0" in str(culprit)
    for other in (errors[0], errors[2]):
        assert type(other) is kafka.errors.KafkaError
        assert "part of a batch which had one more more invalid records" in str(other)


def test_aiokafka_fails_the_batch(broker: BrokerProcess) -> None:
    async def produce() -> list[BaseException | None]:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, acks="all", linger_ms=200, enable_idempotence=False
        )
        await producer.start()
        try:
            futures = [
                await producer.send(COMPACTED, value=b"v", key=key, partition=0)
                for key in (b"a", None)
            ]
            done = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 20)
        finally:
            await producer.stop()
        return [d if isinstance(d, BaseException) else None for d in done]

    errors = asyncio.run(produce())
    # aiokafka knows no class for INVALID_RECORD (87): its UnknownError stands for it.
    assert all(isinstance(e, aiokafka.errors.UnknownError) for e in errors), errors
