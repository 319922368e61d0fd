"""Produce and consume with librdkafka, kafka-python and aiokafka, in every pairing.

Records carry keys, headers, null keys, null values, empty values and explicit or
producer-chosen timestamps over several partitions. Offsets must be dense and exact:
each producer is told 0..n-1 per partition in send order, and every consumer sees
exactly those records at exactly those offsets. LogAppendTime topics get the broker's
clock, reported to producers and consumers with its type; 1 MB values pass, records
over max.message.bytes are refused with MESSAGE_TOO_LARGE.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence

import kafka.errors
import pytest

from support.broker import BrokerProcess
from support.clients import (
    CLIENTS,
    CREATE_TIME,
    LOG_APPEND_TIME,
    Delivered,
    Outgoing,
    Record,
    consume,
    create_topic,
    now_ms,
    produce,
    running_broker,
)

PARTITIONS = 3
PER_PARTITION = 12
ONE_MB = 1_000_000
# librdkafka refuses records over its own message.max.bytes (1000000) before sending.
BIG_RECORDS = {
    "confluent": {"message.max.bytes": 4_000_000},
    "kafka-python": {"max_request_size": 4_000_000},
    "aiokafka": {"max_request_size": 4_000_000},
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("produce_consume")) as broker:
        yield broker


def _varied_records(base_timestamp: int, null_header_values: bool) -> list[Outgoing]:
    """Every shape of record, spread round-robin over the partitions. (kafka-python
    cannot send a header with a null value.)"""
    null = None if null_header_values else b"-"
    shapes = [
        lambda i: Outgoing(0, b"value-%d" % i, b"key-%d" % i, (("h1", b"a"), ("h2", b"b"))),
        lambda i: Outgoing(0, b"no key %d" % i, None),
        lambda i: Outgoing(0, None, b"tombstone-%d" % i),
        lambda i: Outgoing(0, b"", b"empty-value-%d" % i),
        lambda i: Outgoing(0, bytes(range(256)) * 4, b"", (("dup", b"1"), ("dup", b"2"))),
        lambda i: Outgoing(0, b"null header %d" % i, b"k", (("n", null), ("\u00e9t\u00e9", b""))),
    ]
    records = []
    for i in range(PARTITIONS * PER_PARTITION):
        shape = shapes[i % len(shapes)](i)
        # Every other record has an explicit CreateTime in the past; the rest are stamped
        # by the producer.
        timestamp = base_timestamp + i if i % 2 == 0 else None
        records.append(Outgoing(i % PARTITIONS, shape.value, shape.key, shape.headers, timestamp))
    return records


def _assert_dense(records: Sequence[Outgoing], delivered: Sequence[Delivered]) -> None:
    """Per partition the producer was told 0, 1, 2, ... in the order it sent."""
    for partition in range(PARTITIONS):
        offsets = [
            d.offset for r, d in zip(records, delivered, strict=True) if r.partition == partition
        ]
        assert offsets == list(range(len(offsets)))
    assert [d.partition for d in delivered] == [r.partition for r in records]


def _assert_consumed_as_sent(
    records: Sequence[Outgoing],
    delivered: Sequence[Delivered],
    consumed: Sequence[Record],
    window: tuple[int, int],
) -> None:
    """Consumers see each record at its delivered offset with what was sent; its
    CreateTime is the one sent, or the producer's clock (inside ``window``), and the
    one the producer was told when the client reports it."""
    expected = sorted(
        (
            (d.partition, d.offset, r.key, r.value, r.headers, CREATE_TIME)
            for r, d in zip(records, delivered, strict=True)
        ),
        key=lambda e: (e[0], e[1]),
    )
    assert [
        (c.partition, c.offset, c.key, c.value, c.headers, c.timestamp_type) for c in consumed
    ] == expected
    sent = {(d.partition, d.offset): (r, d) for r, d in zip(records, delivered, strict=True)}
    for c in consumed:
        record, delivery = sent[(c.partition, c.offset)]
        if record.timestamp is not None:
            assert c.timestamp == record.timestamp
        else:
            assert window[0] <= c.timestamp <= window[1]
        if delivery.timestamp is not None:
            assert c.timestamp == delivery.timestamp


@pytest.mark.parametrize(("producer", "consumer"), list(itertools.product(CLIENTS, CLIENTS)))
def test_records_round_trip_with_exact_offsets(
    shared: BrokerProcess, producer: str, consumer: str
) -> None:
    topic = f"round-trip-{producer}-{consumer}"
    create_topic(shared.bootstrap, topic, PARTITIONS)
    records = _varied_records(now_ms() - 3_600_000, producer != "kafka-python")
    before = now_ms()
    delivered = produce(producer, shared.bootstrap, topic, records)
    after = now_ms()
    _assert_dense(records, delivered)

    got = consume(consumer, shared.bootstrap, topic, len(records), range(PARTITIONS))
    _assert_consumed_as_sent(records, delivered, got.records, (before - 1000, after + 1000))


@pytest.mark.parametrize("consumer", CLIENTS)
def test_consumer_starting_mid_partition_sees_the_rest(
    shared: BrokerProcess, consumer: str
) -> None:
    topic = f"mid-{consumer}"
    create_topic(shared.bootstrap, topic, 1)
    records = [Outgoing(0, b"r%d" % i) for i in range(40)]
    delivered = produce("confluent", shared.bootstrap, topic, records, {"linger.ms": 50})
    assert [d.offset for d in delivered] == list(range(40))
    # Offset 17 sits inside a batch: the batch is fetched whole, the client skips ahead.
    got = consume(consumer, shared.bootstrap, topic, 23, start={0: 17})
    assert [(r.offset, r.value) for r in got.records] == [(i, b"r%d" % i) for i in range(17, 40)]


@pytest.mark.parametrize("producer", CLIENTS)
def test_log_append_time_is_set_by_the_broker(shared: BrokerProcess, producer: str) -> None:
    topic = f"log-append-{producer}"
    create_topic(shared.bootstrap, topic, 2, {"message.timestamp.type": "LogAppendTime"})
    sent_timestamp = now_ms() - 86_400_000
    records = [Outgoing(i % 2, b"v%d" % i, None, (), sent_timestamp) for i in range(10)]
    before = now_ms()
    delivered = produce(producer, shared.bootstrap, topic, records)
    after = now_ms()
    for d in delivered:
        assert d.timestamp is not None
        assert before - 1000 <= d.timestamp <= after + 1000
        assert d.timestamp_type in (None, LOG_APPEND_TIME)

    consumer = CLIENTS[(CLIENTS.index(producer) + 1) % len(CLIENTS)]
    got = consume(consumer, shared.bootstrap, topic, len(records), range(2))
    assert len(got.records) == len(records)
    by_offset = {(d.partition, d.offset): d for d in delivered}
    for record in got.records:
        assert record.timestamp_type == LOG_APPEND_TIME
        assert record.timestamp == by_offset[(record.partition, record.offset)].timestamp
        assert record.timestamp != sent_timestamp


@pytest.mark.parametrize("producer", CLIENTS)
def test_one_megabyte_values(shared: BrokerProcess, producer: str) -> None:
    topic = f"big-{producer}"
    create_topic(shared.bootstrap, topic, 1)
    values = [os.urandom(ONE_MB) for _ in range(3)]
    records = [Outgoing(0, value, b"big-%d" % i) for i, value in enumerate(values)]
    delivered = produce(producer, shared.bootstrap, topic, records, BIG_RECORDS[producer])
    assert [d.offset for d in delivered] == [0, 1, 2]

    consumer = CLIENTS[(CLIENTS.index(producer) + 1) % len(CLIENTS)]
    got = consume(consumer, shared.bootstrap, topic, 3)
    assert [r.offset for r in got.records] == [0, 1, 2]
    assert got.values() == values


def test_records_over_max_message_bytes_are_refused(shared: BrokerProcess) -> None:
    """A 1 MiB value does not fit the default max.message.bytes (1 MiB + 12 bytes for the
    whole batch) and is refused by the broker; the partition stays usable."""
    topic = "too-large"
    create_topic(shared.bootstrap, topic, 1)
    too_big = [Outgoing(0, b"x" * 1_048_576)]
    with pytest.raises(AssertionError, match="MSG_SIZE_TOO_LARGE"):
        produce("confluent", shared.bootstrap, topic, too_big, BIG_RECORDS["confluent"])
    with pytest.raises(kafka.errors.MessageSizeTooLargeError):
        produce("kafka-python", shared.bootstrap, topic, too_big, BIG_RECORDS["kafka-python"])
    assert [
        d.offset for d in produce("aiokafka", shared.bootstrap, topic, [Outgoing(0, b"ok")])
    ] == [0]
