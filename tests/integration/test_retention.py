"""Retention by size and time, and DeleteRecords, seen from clients and on disk.

Topics get small segments and the broker a short retention check interval, so whole
segments expire within a second: their files are renamed ``.deleted`` and gone after
``file.delete.delay.ms``, the earliest offset advances to the first remaining
segment's base offset while the latest stays, and consumers reading from the
beginning — or from an offset that no longer exists — get exactly what remains.
DeleteRecords (librdkafka, kafka-python, aiokafka) moves the low watermark, even into a
batch, refuses offsets past the high watermark (OFFSET_OUT_OF_RANGE), and survives a
restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import aiokafka.admin
import kafka
import pytest
from confluent_kafka import OFFSET_END, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from support.broker import BrokerProcess
from support.clients import (
    CLIENTS,
    Outgoing,
    consume,
    create_topic,
    now_ms,
    produce,
    running_broker,
    wait_until,
    watermarks,
)

BROKER_OVERRIDES: Final = {"log.retention.check.interval.ms": 200}
SEGMENTS: Final = {"segment.bytes": "1024", "file.delete.delay.ms": "300"}
COUNT: Final = 100
OFFSET_OUT_OF_RANGE: Final = 1
# A record of ~100 bytes: ~10 records per 1 KiB segment, batches of two.
SMALL_BATCHES: Final = {"batch.num.messages": 2, "linger.ms": 5}


def _value(i: int) -> bytes:
    return b"%05d:" % i + b"r" * 80


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("retention"), BROKER_OVERRIDES) as broker:
        yield broker


def _fill(bootstrap: str, topic: str, timestamps: list[int | None]) -> None:
    records = [Outgoing(0, _value(i), None, (), ts) for i, ts in enumerate(timestamps)]
    delivered = produce("confluent", bootstrap, topic, records, SMALL_BATCHES)
    assert [d.offset for d in delivered] == list(range(len(records)))


def _segment_bases(partition_dir: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in partition_dir.glob("*.log"))


def _deleted_files(partition_dir: Path) -> list[Path]:
    return list(partition_dir.glob("*.deleted"))


def _assert_reads_from(bootstrap: str, topic: str, earliest: int, end: int) -> None:
    """Every client, from the beginning or from offset 0 (reset to the earliest),
    reads exactly [earliest, end)."""
    expected = [(i, _value(i)) for i in range(earliest, end)]
    for client in CLIENTS:
        got = consume(client, bootstrap, topic, end - earliest)
        assert [(r.offset, r.value) for r in got.records] == expected, client
    got = consume("kafka-python", bootstrap, topic, end - earliest, start={0: 0})
    assert [(r.offset, r.value) for r in got.records] == expected


def test_retention_bytes_deletes_the_oldest_segments(shared: BrokerProcess) -> None:
    topic = "retained-by-size"
    create_topic(shared.bootstrap, topic, 1, {**SEGMENTS, "retention.bytes": "3000"})
    partition_dir = shared.log_dir / f"{topic}-0"
    _fill(shared.bootstrap, topic, [None] * COUNT)

    assert wait_until(lambda: watermarks(shared.bootstrap, topic)[0] > 0, 10)
    assert wait_until(lambda: not _deleted_files(partition_dir), 10), "files not removed"
    bases = _segment_bases(partition_dir)
    earliest, latest = watermarks(shared.bootstrap, topic)
    assert latest == COUNT
    assert earliest == bases[0]
    # Kafka's rule: drop the oldest segments while the rest still hold retention.bytes.
    sizes = [(partition_dir / f"{b:020d}.log").stat().st_size for b in bases]
    assert sum(sizes) - sizes[0] < 3000 <= sum(sizes)
    _assert_reads_from(shared.bootstrap, topic, earliest, COUNT)

    assert produce("aiokafka", shared.bootstrap, topic, [Outgoing(0, b"more")])[0].offset == COUNT


def test_retention_ms_deletes_expired_segments(shared: BrokerProcess) -> None:
    topic = "retained-by-time"
    create_topic(shared.bootstrap, topic, 1, {**SEGMENTS, "retention.ms": "3600000"})
    partition_dir = shared.log_dir / f"{topic}-0"
    old = now_ms() - 7_200_000
    half = COUNT // 2
    _fill(shared.bootstrap, topic, [old + i for i in range(half)] + [None] * half)

    assert wait_until(lambda: watermarks(shared.bootstrap, topic)[0] > 0, 10)
    assert wait_until(lambda: not _deleted_files(partition_dir), 10)
    earliest, latest = watermarks(shared.bootstrap, topic)
    assert latest == COUNT
    assert 0 < earliest <= half, "only segments holding nothing but old records expire"
    assert _segment_bases(partition_dir)[0] == earliest
    _assert_reads_from(shared.bootstrap, topic, earliest, COUNT)


def test_retention_ms_can_expire_the_active_segment(shared: BrokerProcess) -> None:
    """When every segment has expired, Kafka rolls a new empty one: the log is empty,
    starts at the old log end offset, and takes records from there."""
    topic = "all-expired"
    create_topic(shared.bootstrap, topic, 1, {**SEGMENTS, "retention.ms": "3600000"})
    old = now_ms() - 7_200_000
    _fill(shared.bootstrap, topic, [old + i for i in range(30)])
    assert wait_until(lambda: watermarks(shared.bootstrap, topic) == (30, 30), 10)
    assert _segment_bases(shared.log_dir / f"{topic}-0") == [30]
    delivered = produce("kafka-python", shared.bootstrap, topic, [Outgoing(0, _value(30))])
    assert delivered[0].offset == 30
    _assert_reads_from(shared.bootstrap, topic, 30, 31)


# -- DeleteRecords -----------------------------------------------------------------------


def _kafka_python_delete(bootstrap: str, topic: str, offset: int) -> int:
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        tp = kafka.TopicPartition(topic, 0)
        result = admin.delete_records({tp: offset})
    finally:
        admin.close()
    return int(result[tp]["low_watermark"])


def _aiokafka_delete(bootstrap: str, topic: str, offset: int) -> int:
    async def run() -> Any:
        admin = aiokafka.admin.AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            return (await admin.delete_records({tp: aiokafka.admin.RecordsToDelete(offset)}))[tp]
        finally:
            await admin.close()

    return int(asyncio.run(run()))


def _confluent_delete(admin: AdminClient, topic: str, partition: int, offset: int) -> Any:
    """The DeletedRecords (low watermark); the admin client must outlive the call."""
    tp = TopicPartition(topic, partition, offset)
    futures = admin.delete_records([tp], operation_timeout=10)
    return futures[TopicPartition(topic, partition)].result(10)


def test_delete_records_moves_the_low_watermark(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(BROKER_OVERRIDES)
    topic = "deleted"
    create_topic(broker.bootstrap, topic, 2, SEGMENTS)
    _fill(broker.bootstrap, topic, [None] * COUNT)
    produce("confluent", broker.bootstrap, topic, [Outgoing(1, b"p1-%d" % i) for i in range(5)])
    partition_dir = broker.log_dir / f"{topic}-0"
    segments_before = _segment_bases(partition_dir)
    rdk = AdminClient({"bootstrap.servers": broker.bootstrap})

    # librdkafka: into the middle of a batch; again lower (a no-op); past the end.
    assert _confluent_delete(rdk, topic, 0, 25).low_watermark == 25
    assert _confluent_delete(rdk, topic, 0, 10).low_watermark == 25
    with pytest.raises(KafkaException) as beyond:
        _confluent_delete(rdk, topic, 0, COUNT + 1)
    assert beyond.value.args[0].code() == OFFSET_OUT_OF_RANGE
    # Up to the high watermark (librdkafka's OFFSET_END) empties partition 1.
    assert _confluent_delete(rdk, topic, 1, OFFSET_END).low_watermark == 5
    assert watermarks(broker.bootstrap, topic, 1) == (5, 5)
    assert watermarks(broker.bootstrap, topic, 0) == (25, COUNT)
    _assert_reads_from(broker.bootstrap, topic, 25, COUNT)

    assert _kafka_python_delete(broker.bootstrap, topic, 40) == 40
    assert _aiokafka_delete(broker.bootstrap, topic, 57) == 57
    assert watermarks(broker.bootstrap, topic, 0) == (57, COUNT)
    _assert_reads_from(broker.bootstrap, topic, 57, COUNT)

    # Segments wholly below the log start offset leave the disk at the next check.
    def only_live_segments() -> bool:
        bases = _segment_bases(partition_dir)
        return bases[0] <= 57 and (len(bases) == 1 or bases[1] > 57)

    assert wait_until(only_live_segments, 10), _segment_bases(partition_dir)
    assert len(_segment_bases(partition_dir)) < len(segments_before)
    assert wait_until(lambda: not _deleted_files(partition_dir), 10)

    # The low watermark is checkpointed and survives a restart.
    broker.restart()
    assert watermarks(broker.bootstrap, topic, 0) == (57, COUNT)
    assert watermarks(broker.bootstrap, topic, 1) == (5, 5)
    _assert_reads_from(broker.bootstrap, topic, 57, COUNT)
    assert produce("confluent", broker.bootstrap, topic, [Outgoing(0, b"x")])[0].offset == COUNT
