"""ListOffsets through every client: earliest, latest, by timestamp and max timestamp.

The records carry explicit CreateTimes that increase by 10 ms, except one far later
in the middle (so the largest timestamp is not the last record's, and a lookup past
the ordinary ones lands on it). Records are spread over several small segments, with
and without time index entries, in batches of several records, so a lookup has to pick
the right segment, then the right record inside a batch. Kafka's answers: the first
offset whose timestamp is >= the target, nothing (-1 / None) past the largest; -3 gives
the offset of the largest timestamp; after DeleteRecords nothing below the log start
offset is returned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiokafka
import kafka
import kafka.admin
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from support.broker import BrokerProcess
from support.clients import Outgoing, create_topic, now_ms, produce, running_broker

COUNT = 60
OUTLIER = 45  # this record's timestamp is the largest, far after the others
OUTLIER_DELAY_MS = 100_000
STEP_MS = 10

# librdkafka's offset specs (its Python wrappers are untyped).
EARLIEST: Final = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
LATEST: Final = OffsetSpec.latest()  # type: ignore[no-untyped-call]
MAX_TIMESTAMP: Final = OffsetSpec.max_timestamp()  # type: ignore[no-untyped-call]

LAYOUTS = {
    # Many segments whose batches are too small to get time index entries.
    "small-segments": {"segment.bytes": "1024"},
    # Many segments, a time index entry for every batch.
    "small-segments-indexed": {"segment.bytes": "1024", "index.interval.bytes": "1"},
    # One segment, indexed.
    "one-segment": {"index.interval.bytes": "1"},
}


@dataclass(frozen=True, slots=True)
class Layout:
    topic: str
    timestamps: list[int]

    def first_at_or_after(self, target: int, start: int = 0) -> int | None:
        """Kafka's answer: the first offset (at or after ``start``) with timestamp >= target."""
        return next(
            (i for i, ts in enumerate(self.timestamps) if i >= start and ts >= target), None
        )

    def targets(self) -> list[int]:
        """Timestamps worth asking about: before, on, between and after records."""
        base = self.timestamps[0]
        targets = [0, base - 1, base, base + 1, base + STEP_MS * 30, base + STEP_MS * 30 + 5]
        targets += [self.timestamps[OUTLIER - 1] + 1, self.timestamps[-1], self.timestamps[-1] + 1]
        targets += [self.timestamps[OUTLIER] - 1, self.timestamps[OUTLIER]]
        targets += [self.timestamps[OUTLIER] + 1, 2**62]
        return targets


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("list_offsets")) as broker:
        yield broker


def _make_layout(bootstrap: str, log_dir: Path, topic: str, config: dict[str, str]) -> Layout:
    create_topic(bootstrap, topic, 1, config)
    base = now_ms() - 3_600_000
    timestamps = [base + STEP_MS * i for i in range(COUNT)]
    timestamps[OUTLIER] = base + OUTLIER_DELAY_MS
    records = [Outgoing(0, b"record-%03d " % i * 8, None, (), t) for i, t in enumerate(timestamps)]
    settings = {"linger.ms": 50, "batch.num.messages": 4}
    delivered = produce("confluent", bootstrap, topic, records, settings)
    assert [d.offset for d in delivered] == list(range(COUNT))
    if config.get("segment.bytes") == "1024":
        segments = list((log_dir / f"{topic}-0").glob("*.log"))
        assert len(segments) >= 5, "the records should span several segments"
    return Layout(topic, timestamps)


@pytest.fixture(scope="module", params=list(LAYOUTS))
def layout(request: pytest.FixtureRequest, shared: BrokerProcess) -> Layout:
    """One topic per layout, shared by the read-only tests."""
    return _make_layout(
        shared.bootstrap, shared.log_dir, f"offsets-{request.param}", LAYOUTS[request.param]
    )


# -- per-client lookups: each returns offset (and timestamp where the client gives it) ---


def _confluent_consumer(bootstrap: str) -> Any:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "list-offsets"})


def test_earliest_and_latest(shared: BrokerProcess, layout: Layout) -> None:
    tp = TopicPartition(layout.topic, 0)
    consumer = _confluent_consumer(shared.bootstrap)
    try:
        assert consumer.get_watermark_offsets(tp, timeout=10) == (0, COUNT)
    finally:
        consumer.close()

    admin = AdminClient({"bootstrap.servers": shared.bootstrap})
    for spec, expected in ((EARLIEST, 0), (LATEST, COUNT)):
        result = admin.list_offsets({tp: spec})[tp].result(10)
        assert result.offset == expected

    kp = kafka.KafkaConsumer(bootstrap_servers=shared.bootstrap)
    try:
        ktp = kafka.TopicPartition(layout.topic, 0)
        assert kp.beginning_offsets([ktp]) == {ktp: 0}
        assert kp.end_offsets([ktp]) == {ktp: COUNT}
    finally:
        kp.close()

    async def aio() -> tuple[Any, Any]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=shared.bootstrap)
        await consumer.start()
        try:
            atp = aiokafka.TopicPartition(layout.topic, 0)
            return (
                (await consumer.beginning_offsets([atp]))[atp],
                (await consumer.end_offsets([atp]))[atp],
            )
        finally:
            await consumer.stop()

    assert asyncio.run(aio()) == (0, COUNT)


def test_offsets_for_times_librdkafka(shared: BrokerProcess, layout: Layout) -> None:
    targets = layout.targets()
    consumer = _confluent_consumer(shared.bootstrap)
    try:
        for target in targets:
            (found,) = consumer.offsets_for_times(
                [TopicPartition(layout.topic, 0, target)], timeout=10
            )
            expected = layout.first_at_or_after(target)
            assert found.error is None
            assert found.offset == (-1 if expected is None else expected), target
    finally:
        consumer.close()

    admin = AdminClient({"bootstrap.servers": shared.bootstrap})
    tp = TopicPartition(layout.topic, 0)
    for target in targets:
        result = admin.list_offsets({tp: OffsetSpec.for_timestamp(target)})[tp].result(10)
        expected = layout.first_at_or_after(target)
        if expected is None:
            assert (result.offset, result.timestamp) == (-1, -1), target
        else:
            assert (result.offset, result.timestamp) == (expected, layout.timestamps[expected])
            assert result.leader_epoch == 0


def test_offsets_for_times_kafka_python(shared: BrokerProcess, layout: Layout) -> None:
    consumer = kafka.KafkaConsumer(bootstrap_servers=shared.bootstrap)
    tp = kafka.TopicPartition(layout.topic, 0)
    try:
        for target in layout.targets():
            found = consumer.offsets_for_times({tp: target})[tp]
            expected = layout.first_at_or_after(target)
            if expected is None:
                assert found is None, target
            else:
                assert (found.offset, found.timestamp) == (expected, layout.timestamps[expected])
    finally:
        consumer.close()


def test_offsets_for_times_aiokafka(shared: BrokerProcess, layout: Layout) -> None:
    async def lookups() -> list[Any]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=shared.bootstrap)
        await consumer.start()
        tp = aiokafka.TopicPartition(layout.topic, 0)
        try:
            return [
                (await consumer.offsets_for_times({tp: target}))[tp] for target in layout.targets()
            ]
        finally:
            await consumer.stop()

    for target, found in zip(layout.targets(), asyncio.run(lookups()), strict=True):
        expected = layout.first_at_or_after(target)
        if expected is None:
            assert found is None, target
        else:
            assert (found.offset, found.timestamp) == (expected, layout.timestamps[expected])


def test_max_timestamp(shared: BrokerProcess, layout: Layout) -> None:
    tp = TopicPartition(layout.topic, 0)
    admin = AdminClient({"bootstrap.servers": shared.bootstrap})
    result = admin.list_offsets({tp: MAX_TIMESTAMP})[tp].result(10)
    assert (result.offset, result.timestamp) == (OUTLIER, layout.timestamps[OUTLIER])

    kp = kafka.KafkaAdminClient(bootstrap_servers=shared.bootstrap)
    try:
        ktp = kafka.TopicPartition(layout.topic, 0)
        specs = {ktp: kafka.OffsetSpec.MAX_TIMESTAMP}
        found = kp.list_partition_offsets(specs)[ktp]
        assert (found.offset, found.timestamp) == (OUTLIER, layout.timestamps[OUTLIER])
        local = kp.list_partition_offsets({ktp: kafka.OffsetSpec.EARLIEST_LOCAL})[ktp]
        assert local.offset == 0
    finally:
        kp.close()


def test_empty_partition(shared: BrokerProcess) -> None:
    topic = "offsets-empty"
    create_topic(shared.bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    admin = AdminClient({"bootstrap.servers": shared.bootstrap})
    specs = {
        "earliest": EARLIEST,
        "latest": LATEST,
        "timestamp": OffsetSpec.for_timestamp(0),
        "max": MAX_TIMESTAMP,
    }
    results = {
        name: admin.list_offsets({tp: spec})[tp].result(10).offset for name, spec in specs.items()
    }
    assert results == {"earliest": 0, "latest": 0, "timestamp": -1, "max": -1}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_lookups_after_delete_records_start_at_the_log_start(
    shared: BrokerProcess, name: str
) -> None:
    layout = _make_layout(shared.bootstrap, shared.log_dir, f"deleted-{name}", LAYOUTS[name])
    tp = TopicPartition(layout.topic, 0)
    admin = AdminClient({"bootstrap.servers": shared.bootstrap})
    start = 22  # inside a batch
    deleted = admin.delete_records([TopicPartition(layout.topic, 0, start)])
    assert deleted[tp].result(10).low_watermark == start

    assert admin.list_offsets({tp: EARLIEST})[tp].result(10).offset == start
    assert admin.list_offsets({tp: LATEST})[tp].result(10).offset == COUNT
    for target in layout.targets():
        result = admin.list_offsets({tp: OffsetSpec.for_timestamp(target)})[tp].result(10)
        expected = layout.first_at_or_after(target, start)
        assert result.offset == (-1 if expected is None else expected), target
    result = admin.list_offsets({tp: MAX_TIMESTAMP})[tp].result(10)
    assert (result.offset, result.timestamp) == (OUTLIER, layout.timestamps[OUTLIER])
