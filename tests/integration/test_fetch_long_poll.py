"""Fetch long polling: a fetch waiting for min_bytes is completed by an append, not by
its max_wait, and the byte limits of the response and of each partition hold; a
partition whose first batch does not fit in what an earlier one left answers no
records, never a fragment of the batch (Kafka's ReplicaManager.readFromLog)."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import kafka
import pytest
from confluent_kafka import Producer
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from support.broker import BrokerProcess
from support.clients import create_topic, running_broker
from support.wire import WireClient
from tiercel.protocol.record_batch import iter_batches


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(Path(tmp_path_factory.mktemp("longpoll"))) as broker:
        create_topic(broker.bootstrap, "waiting", 1)
        create_topic(broker.bootstrap, "limits", 2)
        create_topic(broker.bootstrap, "cut", 2)
        # Partition 0: three batches of about 10 KB; partition 1: one of about 100 KB,
        # larger than what a 50,000-byte response has left once partition 0 is read.
        _produce(broker.bootstrap, "cut", [bytes(10_000)] * 3, partition=0)
        _produce(broker.bootstrap, "cut", [bytes(100_000)], partition=1)
        yield broker


def _fetch(
    topic: str,
    partitions: dict[int, int],
    max_wait_ms: int,
    min_bytes: int = 1,
    max_bytes: int = 50 << 20,
    partition_max_bytes: int = 1 << 20,
) -> FetchRequest:
    return FetchRequest(
        replica_id=i32(-1),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(min_bytes), max_bytes=i32(max_bytes), isolation_level=i8(0),
        session_id=i32(0), session_epoch=i32(-1),
        topics=(FetchTopic(topic=TopicName(topic), partitions=tuple(
            FetchPartition(partition=i32(p), current_leader_epoch=i32(-1),
                           fetch_offset=i64(offset), last_fetched_epoch=i32(-1),
                           log_start_offset=i64(-1), partition_max_bytes=i32(partition_max_bytes))
            for p, offset in partitions.items())),),
        forgotten_topics_data=(), rack_id="",
    )  # fmt: skip


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for value in values:
        producer.produce(topic, value, partition=partition)
        assert producer.flush(15) == 0  # one batch per record


def test_a_waiting_fetch_is_completed_by_the_append(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap, timeout=30) as client:
        started = time.monotonic()
        appender = threading.Timer(1.0, _produce, (broker.bootstrap, "waiting", [b"wake up"]))
        appender.start()
        response = client.request(_fetch("waiting", {0: 0}, max_wait_ms=20_000))
        elapsed = time.monotonic() - started
        appender.join()
    partition = response.responses[0].partitions[0]
    assert partition.high_watermark == 1
    assert partition.records  # the appended batch, not an empty timeout answer
    assert 0.9 < elapsed < 10, elapsed


def test_a_fetch_with_nothing_to_read_waits_max_wait(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        started = time.monotonic()
        response = client.request(_fetch("waiting", {0: 1}, max_wait_ms=700))
        elapsed = time.monotonic() - started
    assert response.responses[0].partitions[0].records in (b"", None)
    assert 0.6 < elapsed < 5, elapsed


def test_response_and_partition_byte_limits(broker: BrokerProcess) -> None:
    # Batches of ~10 KB in both partitions.
    _produce(broker.bootstrap, "limits", [bytes(10_000)] * 8, partition=0)
    _produce(broker.bootstrap, "limits", [bytes(10_000)] * 8, partition=1)
    with WireClient(broker.bootstrap) as client:
        limited = client.request(
            _fetch("limits", {0: 0, 1: 0}, 0, max_bytes=25_000, partition_max_bytes=1 << 20)
        )
        per_partition = client.request(
            _fetch("limits", {0: 0, 1: 0}, 0, partition_max_bytes=15_000)
        )
        tiny = client.request(_fetch("limits", {0: 3}, 0, max_bytes=1, partition_max_bytes=1))
    sizes = [len(p.records or b"") for p in limited.responses[0].partitions]
    # The response budget is shared in order; the first partition may not exceed it...
    assert 0 < sizes[0] <= 25_000 and sizes[1] == 0, sizes
    assert all(0 < len(p.records) <= 15_000 for p in per_partition.responses[0].partitions)
    # ...but a first batch larger than every limit still comes whole (KIP-74).
    (record_batch,) = [
        header for _, header in iter_batches(tiny.responses[0].partitions[0].records)
    ]
    assert record_batch.base_offset == 3


def test_a_first_batch_that_does_not_fit_what_is_left_answers_no_records(
    broker: BrokerProcess,
) -> None:
    """Before, partition 1 answered the ~20 KB left of the response: a fragment of its
    100 KB batch with no complete record in it."""
    with WireClient(broker.bootstrap) as client:
        both = client.request(_fetch("cut", {0: 0, 1: 0}, 0, max_bytes=50_000))
        alone = client.request(_fetch("cut", {1: 0}, 0, max_bytes=50_000))
    first, second = both.responses[0].partitions
    assert [h.base_offset for _, h in iter_batches(first.records)] == [0, 1, 2]
    assert second.error_code == 0 and second.high_watermark == 1
    assert second.records in (b"", None)
    # First in its response, the batch comes whole (KIP-74).
    (batch,) = [h for _, h in iter_batches(alone.responses[0].partitions[0].records)]
    assert batch.size_in_bytes > 100_000


def test_kafka_python_reads_a_batch_larger_than_what_is_left(broker: BrokerProcess) -> None:
    """kafka-python fails a poll on a non-empty partition without a complete batch
    ("no complete records were found"), as the Java consumer does."""
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        fetch_max_bytes=50_000,
        fetch_max_wait_ms=100,
    )
    got: list[tuple[int, int]] = []
    try:
        consumer.assign([kafka.TopicPartition("cut", 0), kafka.TopicPartition("cut", 1)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 20
        while len(got) < 4 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend((r.partition, r.offset) for r in records)
    finally:
        consumer.close()
    assert sorted(got) == [(0, 0), (0, 1), (0, 2), (1, 0)]
