"""The three Python Kafka clients behind one small interface, for integration tests.

Each test says *which* client produces and which consumes; these helpers hide how each
library spells it and normalise what comes back, so that a record produced by
kafka-python and consumed by librdkafka can be compared field by field:

- timestamps types are Kafka's (0 CreateTime, 1 LogAppendTime), not librdkafka's 1/2;
- headers are tuples of (key, value) pairs, () when there are none;
- a consumer reads from explicit start offsets (no consumer group: these tests are
  about the data; tests/integration/test_consumer_groups.py covers groups) until it has
  the number of records asked for, and fails the test on any error the client reports,
  so corrupt or missing data cannot pass.

Producers run with idempotence off so that these tests exercise the plain produce path;
tests/integration/test_idempotence.py covers the idempotent one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiokafka
import kafka
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from support.broker import BrokerProcess, assert_no_unexpected_errors

CLIENTS: Final = ("confluent", "kafka-python", "aiokafka")
CREATE_TIME: Final = 0
LOG_APPEND_TIME: Final = 1
# librdkafka's TIMESTAMP_CREATE_TIME / TIMESTAMP_LOG_APPEND_TIME to Kafka's attribute bit.
_CONFLUENT_TIMESTAMP_TYPES: Final = {1: CREATE_TIME, 2: LOG_APPEND_TIME}

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A record to produce; ``timestamp`` None lets the producer stamp it."""

    partition: int
    value: bytes | None
    key: bytes | None = None
    headers: Headers = ()
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class Delivered:
    """What the producer was told: where the record went, its timestamp and, when the
    client reports it, the timestamp type (kafka-python does not). The timestamp is None
    when the client does not report the record's own: aiokafka gives every record of a
    CreateTime batch the batch's first timestamp."""

    partition: int
    offset: int
    timestamp: int | None
    timestamp_type: int | None = None


@dataclass(frozen=True, slots=True)
class Record:
    """A consumed record, the same whichever client read it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int
    timestamp_type: int


@dataclass(frozen=True, slots=True)
class Consumed:
    records: list[Record] = field(default_factory=list)

    def values(self) -> list[bytes | None]:
        return [r.value for r in self.records]

    def by_partition(self) -> dict[int, list[Record]]:
        result: dict[int, list[Record]] = {}
        for record in self.records:
            result.setdefault(record.partition, []).append(record)
        return result


def now_ms() -> int:
    return int(time.time() * 1000)


# -- brokers -----------------------------------------------------------------------------


# As in conftest's broker_factory: a loop callback this slow stalled every client.
LOOP_BLOCKED_S: Final = 1.0


@contextmanager
def running_broker(
    data_dir: Path, overrides: Mapping[str, object] | None = None
) -> Iterator[BrokerProcess]:
    """A broker for a whole test module (the conftest fixtures are per test), checked
    at the end for a blocked event loop like the fixture's brokers, and for errors it
    logged after the module's last test (conftest checks the lines of each test)."""
    broker = BrokerProcess(data_dir, dict(overrides or {}))
    try:
        yield broker.start()
    finally:
        broker.kill()
    blocked = broker.slow_callbacks(LOOP_BLOCKED_S)
    assert not blocked, "event loop blocked:\n" + "\n".join(blocked)
    assert_no_unexpected_errors([broker])


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, config: Mapping[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, partitions, 1, config=dict(config or {}))
    admin.create_topics([topic], operation_timeout=10)[name].result(15)


# -- producing ---------------------------------------------------------------------------


def produce(
    client: str,
    bootstrap: str,
    topic: str,
    records: Sequence[Outgoing],
    config: Mapping[str, Any] | None = None,
) -> list[Delivered]:
    """Produce ``records`` in order with acks=all; their deliveries, in the same order.
    ``config`` is passed to the client in its own spelling."""
    if client == "confluent":
        return _produce_confluent(bootstrap, topic, records, config or {})
    if client == "kafka-python":
        return _produce_kafka_python(bootstrap, topic, records, config or {})
    if client == "aiokafka":
        return asyncio.run(_produce_aiokafka(bootstrap, topic, records, config or {}))
    raise ValueError(client)


def _produce_confluent(
    bootstrap: str, topic: str, records: Sequence[Outgoing], config: Mapping[str, Any]
) -> list[Delivered]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **config})
    results: list[Delivered | Exception | None] = [None] * len(records)

    def report(index: int) -> Any:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                results[index] = AssertionError(f"delivery of record {index} failed: {err}")
            else:
                kind, timestamp = msg.timestamp()
                results[index] = Delivered(
                    msg.partition(), msg.offset(), timestamp, _CONFLUENT_TIMESTAMP_TYPES[kind]
                )

        return on_delivery

    for i, record in enumerate(records):
        producer.produce(
            topic,
            value=record.value,
            key=record.key,
            partition=record.partition,
            headers=list(record.headers) or None,
            timestamp=record.timestamp or 0,
            on_delivery=report(i),
        )
        producer.poll(0)
    assert producer.flush(20) == 0, "librdkafka did not deliver everything in time"
    return _checked(results)


def _send_arguments(record: Outgoing) -> dict[str, Any]:
    """`send`'s keyword arguments for one record; kafka-python and aiokafka name them alike."""
    return {
        "value": record.value,
        "key": record.key,
        "partition": record.partition,
        "headers": list(record.headers),
        "timestamp_ms": record.timestamp,
    }


def _produce_kafka_python(
    bootstrap: str, topic: str, records: Sequence[Outgoing], config: Mapping[str, Any]
) -> list[Delivered]:
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, **config
    )
    try:
        futures = [producer.send(topic, **_send_arguments(record)) for record in records]
        producer.flush(20)
        metadata = [future.get(timeout=20) for future in futures]
    finally:
        producer.close(5)
    return [Delivered(m.partition, m.offset, m.timestamp) for m in metadata]


async def _produce_aiokafka(
    bootstrap: str, topic: str, records: Sequence[Outgoing], config: Mapping[str, Any]
) -> list[Delivered]:
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, **config
    )
    await producer.start()
    try:
        futures = [await producer.send(topic, **_send_arguments(record)) for record in records]
        metadata = await asyncio.wait_for(asyncio.gather(*futures), 20)
    finally:
        await producer.stop()
    return [
        Delivered(
            m.partition,
            m.offset,
            m.timestamp if m.timestamp_type == LOG_APPEND_TIME else None,
            m.timestamp_type,
        )
        for m in metadata
    ]


def _checked(results: Sequence[Delivered | Exception | None]) -> list[Delivered]:
    delivered = []
    for i, result in enumerate(results):
        if isinstance(result, Exception):
            raise result
        assert result is not None, f"no delivery report for record {i}"
        delivered.append(result)
    return delivered


# -- consuming ---------------------------------------------------------------------------


def consume(
    client: str,
    bootstrap: str,
    topic: str,
    count: int,
    partitions: Sequence[int] = (0,),
    start: Mapping[int, int] | None = None,
    timeout: float = 20.0,
) -> Consumed:
    """Read ``count`` records from ``partitions`` of ``topic``, each from its offset in
    ``start`` (default: the beginning), then read on a little to catch any extras.
    Records come back ordered by (partition, offset). A start offset out of range
    resets to the earliest offset."""
    starts = {p: (start or {}).get(p, -2) for p in partitions}
    if client == "confluent":
        records = _consume_confluent(bootstrap, topic, starts, count, timeout)
    elif client == "kafka-python":
        records = _consume_kafka_python(bootstrap, topic, starts, count, timeout)
    elif client == "aiokafka":
        records = asyncio.run(_consume_aiokafka(bootstrap, topic, starts, count, timeout))
    else:
        raise ValueError(client)
    return Consumed(sorted(records, key=lambda r: (r.partition, r.offset)))


def _consume_confluent(
    bootstrap: str, topic: str, starts: Mapping[int, int], count: int, timeout: float
) -> list[Record]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tiercel-tests",
            "enable.auto.commit": False,
            "check.crcs": True,
            "fetch.wait.max.ms": 100,
            "auto.offset.reset": "earliest",
        }
    )
    records: list[Record] = []
    try:
        consumer.assign(
            [
                CTopicPartition(topic, p, OFFSET_BEGINNING if offset == -2 else offset)
                for p, offset in starts.items()
            ]
        )
        deadline = time.monotonic() + timeout
        settle = None
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            messages: list[Any] = consumer.consume(500, 0.2)  # None-able fields in the stubs
            for msg in messages:
                assert msg.error() is None, f"librdkafka consumer error: {msg.error()}"
                kind, timestamp = msg.timestamp()
                records.append(
                    Record(
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        tuple(msg.headers() or ()),
                        timestamp,
                        _CONFLUENT_TIMESTAMP_TYPES[kind],
                    )
                )
            if settle is None and len(records) >= count:
                settle = time.monotonic() + 0.3
    finally:
        consumer.close()
    return records


def _consume_kafka_python(
    bootstrap: str, topic: str, starts: Mapping[int, int], count: int, timeout: float
) -> list[Record]:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        check_crcs=True,
        fetch_max_wait_ms=100,
        auto_offset_reset="earliest",
    )
    records: list[Record] = []
    try:
        tps = {p: kafka.TopicPartition(topic, p) for p in starts}
        consumer.assign(list(tps.values()))
        for p, offset in starts.items():
            if offset == -2:
                consumer.seek_to_beginning(tps[p])
            else:
                consumer.seek(tps[p], offset)
        deadline = time.monotonic() + timeout
        settle = None
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(_record_from(m) for m in batch)
            if settle is None and len(records) >= count:
                settle = time.monotonic() + 0.3
    finally:
        consumer.close()
    return records


def _record_from(message: Any) -> Record:
    """A kafka-python or aiokafka ConsumerRecord (they share the attribute names)."""
    return Record(
        message.partition,
        message.offset,
        message.key,
        message.value,
        tuple(message.headers),
        message.timestamp,
        message.timestamp_type,
    )


async def _consume_aiokafka(
    bootstrap: str, topic: str, starts: Mapping[int, int], count: int, timeout: float
) -> list[Record]:
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        check_crcs=True,
        fetch_max_wait_ms=100,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    records: list[Record] = []
    try:
        tps = {p: aiokafka.TopicPartition(topic, p) for p in starts}
        consumer.assign(list(tps.values()))
        for p, offset in starts.items():
            if offset == -2:
                await consumer.seek_to_beginning(tps[p])
            else:
                consumer.seek(tps[p], offset)
        deadline = time.monotonic() + timeout
        settle = None
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            # aiokafka's record type allows None fields that a fetched record never has.
            batches: dict[Any, Any] = await consumer.getmany(timeout_ms=200)
            for batch in batches.values():
                records.extend(_record_from(m) for m in batch)
            if settle is None and len(records) >= count:
                settle = time.monotonic() + 0.3
    finally:
        await consumer.stop()
    return records


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(low, high) watermark of a partition, as librdkafka queries them (ListOffsets)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tiercel-watermarks"})
    try:
        low, high = consumer.get_watermark_offsets(CTopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()
    return int(low), int(high)


def earliest_local_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    """ListOffsets EARLIEST_LOCAL (-4, KIP-405) through kafka-python's admin client."""
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        tp = kafka.TopicPartition(topic, partition)
        return int(admin.list_partition_offsets({tp: kafka.OffsetSpec.EARLIEST_LOCAL})[tp].offset)
    finally:
        admin.close()


def wait_until(condition: Any, timeout: float, interval: float = 0.1) -> bool:
    """Poll ``condition()`` until true or ``timeout`` seconds pass; its last verdict."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def round_trip(config: Mapping[str, Any], topic: str, count: int) -> None:
    """Produce ``count`` records to ``topic`` with librdkafka ``config`` (security
    settings and all), acks=all, and consume exactly them back in order."""
    producer = Producer({**config, "acks": "all"})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), f"k{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [f"v{i}".encode() for i in range(count)]


def round_trip_kafka_python(settings: Mapping[str, Any], topic: str, count: int) -> None:
    """`round_trip` with kafka-python: ``settings`` (security and all) in its spelling."""
    producer = kafka.KafkaProducer(acks="all", **settings)
    for i in range(count):
        producer.send(topic, f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = kafka.KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=30_000, **settings
    )
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == count:
            break
    consumer.close()
    assert values == [f"v{i}".encode() for i in range(count)]


def round_trip_aiokafka(settings: Mapping[str, Any], topic: str, count: int) -> None:
    """`round_trip` with aiokafka: ``settings`` (security and all) in its spelling."""

    async def run() -> list[bytes]:
        producer = aiokafka.AIOKafkaProducer(acks="all", **settings)
        await producer.start()
        try:
            for i in range(count):
                await producer.send_and_wait(topic, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, auto_offset_reset="earliest", **settings)
        await consumer.start()
        values: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for message in consumer:
                    assert message.value is not None
                    values.append(message.value)
                    if len(values) == count:
                        break
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(run()) == [f"v{i}".encode() for i in range(count)]


def produce_numbered(
    bootstrap: str,
    topic: str,
    count: int,
    start: int = 0,
    config: Mapping[str, Any] | None = None,
) -> None:
    """Produce values ``v<start>`` .. ``v<start + count - 1>`` with librdkafka, acks=all
    (``config`` added to the producer's settings), and check every one was delivered."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **(config or {})})
    delivered: list[object] = []
    for i in range(start, start + count):
        producer.produce(topic, value=b"v%d" % i, on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(60) == 0
    # KafkaError cannot be compared with None: count the failures instead.
    assert len(delivered) == count and [e for e in delivered if e is not None] == []


def consume_values(
    bootstrap: str,
    topic: str,
    count: int,
    group: str,
    config: Mapping[str, Any] | None = None,
    timeout_s: float = 60.0,
) -> set[bytes]:
    """The distinct values a consumer of ``group`` (with librdkafka ``config`` added:
    security settings, isolation level) reads from ``topic``, from the earliest offset,
    until it has ``count`` of them or ``timeout_s`` has passed."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            **(config or {}),
        }
    )
    consumer.subscribe([topic])
    values: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.add(message.value())
    finally:
        consumer.close()
    return values
