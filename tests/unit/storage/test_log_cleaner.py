"""Log compaction: the latest record per key stays at its original offset, tombstones go
after delete.retention.ms (KIP-534 delete horizon), compressed and producer batches,
the dirty-ratio and lag rules, a full offset map, the cleaner-offset-checkpoint, a
crash at every step of the swap, the LogManager's cleaner, and a hypothesis model."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_support import (
    BASE_TS,
    Stored,
    decode_all,
    log_records,
    open_log,
    partition_dir,
    small_config,
)

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError
from tiercel.config.log_config import LogConfig
from tiercel.protocol.compression import CompressionType
from tiercel.protocol.end_txn_marker import ControlRecordType, EndTransactionMarker
from tiercel.protocol.record_batch import NO_TIMESTAMP, TimestampType, is_crc_valid
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.checkpoint_file import CLEANER_OFFSET_CHECKPOINT_FILENAME, OffsetCheckpointFile
from tiercel.storage.log_cleaner import CleanerConfig, CleanResult, LogCleaner
from tiercel.storage.log_cleaner_manager import (
    LogToClean,
    cleanable_offsets,
    group_segments_by_size,
    max_compaction_delay,
)
from tiercel.storage.log_manager import LogManager
from tiercel.storage.log_segment import BatchPosition
from tiercel.storage.log_transactions import end_txn_marker_append_batch
from tiercel.storage.log_validator import validate_records
from tiercel.storage.log_values import FetchIsolation, LogAppendInfo
from tiercel.storage.offset_map import ENTRY_OVERHEAD, OffsetMap
from tiercel.storage.producer_append_info import AppendOrigin
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.transaction_index import AbortedTxn
from tiercel.storage.unified_log import UnifiedLog

TP = TopicPartition("t", 0)
NOW = BASE_TS + 10_000_000
DAY = 86_400_000
Entry = tuple[bytes, bytes | None]


def compacted(**overrides: object) -> LogConfig:
    values: dict[str, object] = {"cleanup_policy": ("compact",)}
    values.update(overrides)
    return small_config(**values)


def put(
    log: UnifiedLog,
    entries: Sequence[Entry],
    *,
    timestamp: int = BASE_TS,
    codec: CompressionType = CompressionType.NONE,
    producer: tuple[int, int, int] | None = None,
) -> LogAppendInfo:
    """Append one batch of keyed records as leader and advance the high watermark."""
    records = [SimpleRecord(k, v, timestamp=timestamp + i) for i, (k, v) in enumerate(entries)]
    pid, epoch, sequence = producer or (-1, -1, -1)
    data = build_record_batch(
        records, compression=codec, producer_id=pid, producer_epoch=epoch, base_sequence=sequence
    )
    info = log.append_as_leader(validate_records(data, log.config, BASE_TS), 0, BASE_TS)
    log.update_high_watermark(log.log_end_offset)
    return info


def batches(log: UnifiedLog) -> list[tuple[BatchPosition, bytes]]:
    return [(b, s.read_batch(b)) for s in log.segments for b in s.batches_from(0)]


def latest_by_key(records: Sequence[Stored]) -> dict[bytes | None, tuple[int, bytes | None]]:
    view: dict[bytes | None, tuple[int, bytes | None]] = {}
    for r in records:
        view[r.key] = (r.offset, r.value)
    return view


def cleaner_for(scheduler: Scheduler, *logs: UnifiedLog, **config: Any) -> LogCleaner:
    settings: dict[str, Any] = {"enable": False}
    settings.update(config)
    root = os.path.dirname(logs[0].dir)
    return LogCleaner(
        CleanerConfig(**settings), [root], {log.topic_partition: log for log in logs}, scheduler
    )


async def clean(
    cleaner: LogCleaner,
    log: UnifiedLog,
    now: int = NOW,
    first_dirty: int | None = None,
    offset_map: OffsetMap | None = None,
) -> CleanResult | None:
    """One round from ``first_dirty`` (default: the log start) up to what is cleanable."""
    offsets = cleanable_offsets(log, first_dirty, now)
    to_clean = LogToClean.of(
        log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset
    )
    return await cleaner.clean_log(
        to_clean, offset_map or OffsetMap(1 << 20), now, threading.Event()
    )


def assert_well_formed(log: UnifiedLog) -> None:
    """Offsets strictly increase across the log, every batch's CRC holds, and every
    index entry points at a batch whose last offset it names."""
    last = -1
    for batch, data in batches(log):
        assert is_crc_valid(data, 0, batch.header)
        assert batch.header.base_offset > last
        last = batch.header.last_offset
    for segment in log.segments:
        positions = {b.header.last_offset: b.position for b in segment.batches_from(0)}
        for i in range(segment.offset_index.entries):
            entry = segment.offset_index.entry(i)
            assert positions[entry.offset] == entry.position


async def reopen(log: UnifiedLog, scheduler: Scheduler) -> UnifiedLog:
    """Close cleanly and load the directory again, once the removals of ``.deleted``
    files (file.delete.delay.ms = 0) have run."""
    await log.close()
    await asyncio.sleep(0)
    await scheduler.drain()
    return open_log(log.dir, log.config, scheduler)


@pytest.fixture
def log_dir(tmp_path: Path) -> str:
    return partition_dir(tmp_path)


# -- what a round keeps ----------------------------------------------------------------


async def test_latest_value_per_key_stays_at_its_original_offset(
    log_dir: str, scheduler: Scheduler
) -> None:
    log = open_log(log_dir, compacted(), scheduler)
    written: dict[int, Entry] = {}
    for round_ in range(12):
        entries = [
            (b"key-%d" % ((3 * round_ + i) % 5), b"v-%d-%d" % (round_, i) * 5) for i in range(3)
        ]
        info = put(log, entries)
        written.update(zip(range(info.first_offset, info.last_offset + 1), entries, strict=True))
    log.roll()
    tail = put(log, [(b"key-0", b"in the active segment")])
    assert len(log.segments) == 4
    before = log_records(log)
    cleaner = cleaner_for(scheduler, log)

    result = await clean(cleaner, log)

    assert result is not None and result.end_offset == log.active_segment.base_offset
    assert result.bytes_after < result.bytes_before
    after = log_records(log)
    cleaned = [r for r in after if r.offset < result.end_offset]
    # One record per key below the end, the latest one, at its original offset.
    assert len({r.key for r in cleaned}) == len(cleaned) == 5
    expected = latest_by_key([r for r in before if r.offset < result.end_offset])
    assert {r.key: (r.offset, r.value) for r in cleaned} == expected
    for r in after:
        assert written.get(r.offset, (r.key, r.value)) == (r.key, r.value)
    # The active segment is untouched; offsets have gaps, never repeats.
    assert [r.offset for r in after if r.offset >= result.end_offset] == [tail.first_offset]
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets))
    assert log.log_start_offset == log.segments[0].base_offset == 0 < offsets[0]
    assert log.log_end_offset == tail.last_offset + 1
    assert_well_formed(log)
    # A reopened log reads the same (the swap left final names only).
    reopened = await reopen(log, scheduler)
    assert not [n for n in os.listdir(log_dir) if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert log_records(reopened) == after
    await reopened.close()
    await cleaner.shutdown()


async def test_reads_skip_the_gaps(log_dir: str, scheduler: Scheduler) -> None:
    log = open_log(log_dir, compacted(), scheduler)
    for i in range(20):
        put(log, [(b"a", b"%d" % i * 20), (b"b" if i == 7 else b"a", b"x" * 20)])
    log.roll()
    cleaner = cleaner_for(scheduler, log)
    assert await clean(cleaner, log) is not None
    survivors = [(r.offset, r.key) for r in log_records(log)]
    assert survivors == [(15, b"b"), (39, b"a")]
    # A fetch from an offset that compaction removed starts at the next surviving batch,
    # which consumers read whole and skip ahead in; one past a segment's end moves on.
    for start, first in ((0, 15), (16, 39), (39, 39)):
        data = log.read(start, 1 << 20, FetchIsolation.HIGH_WATERMARK, True)
        assert decode_all(bytes(data.records))[0].offset == first
    found = await log.fetch_offset_by_timestamp(BASE_TS)
    assert found is not None and found.offset == 15
    await cleaner.shutdown()


async def test_tombstones_stay_until_delete_retention_then_go(
    log_dir: str, scheduler: Scheduler
) -> None:
    retention = 60_000
    log = open_log(log_dir, compacted(delete_retention_ms=retention), scheduler)
    put(log, [(b"gone", b"v1"), (b"kept", b"v1")])
    put(log, [(b"gone", None), (b"kept", b"v2")])
    log.roll()
    put(log, [(b"other", b"x")])
    cleaner = cleaner_for(scheduler, log)

    assert await clean(cleaner, log, now=NOW) is not None
    assert [(r.offset, r.key, r.value) for r in log_records(log)] == [
        (2, b"gone", None),
        (3, b"kept", b"v2"),
        (4, b"other", b"x"),
    ]
    # The batch keeping the tombstone carries the delete horizon (KIP-534): attribute
    # bit 6, baseTimestamp = now + delete.retention.ms; record timestamps are unchanged.
    header = batches(log)[0][0].header
    assert header.has_delete_horizon and header.base_timestamp == NOW + retention
    assert [r.timestamp for r in log_records(log)][:2] == [BASE_TS, BASE_TS + 1]

    # Before the horizon the tombstone stays (the horizon is not moved); at it, it goes.
    assert await clean(cleaner, log, now=NOW + retention - 1) is not None
    assert [r.offset for r in log_records(log)] == [2, 3, 4]
    assert batches(log)[0][0].header.base_timestamp == NOW + retention
    assert await clean(cleaner, log, now=NOW + retention) is not None
    assert [(r.offset, r.key) for r in log_records(log)] == [(3, b"kept"), (4, b"other")]
    # The rebuilt batch keeps its horizon, as Kafka's does.
    assert batches(log)[0][0].header.base_timestamp == NOW + retention
    assert_well_formed(log)
    await cleaner.shutdown()


@pytest.mark.parametrize("codec", list(CompressionType))
async def test_compressed_batches_are_rebuilt_with_their_codec(
    log_dir: str, scheduler: Scheduler, codec: CompressionType
) -> None:
    log = open_log(log_dir, compacted(segment_bytes=4096), scheduler)
    for i in range(4):
        put(log, [(b"k%d" % j, b"%d-%d" % (i, j) * 30) for j in range(6)], codec=codec)
    put(log, [(b"k1", b"newest"), (b"k4", None)], codec=codec)
    log.roll()
    cleaner = cleaner_for(scheduler, log)
    assert await clean(cleaner, log) is not None
    view = {r.key: (r.offset, r.value) for r in log_records(log)}
    assert view == {
        b"k0": (18, b"3-0" * 30),
        b"k1": (24, b"newest"),
        b"k2": (20, b"3-2" * 30),
        b"k3": (21, b"3-3" * 30),
        b"k4": (25, None),
        b"k5": (23, b"3-5" * 30),
    }
    rebuilt = [b.header for b, _ in batches(log)]
    assert [h.compression for h in rebuilt] == [codec, codec]
    # Base offsets and last offset deltas survive; the record count is what remains.
    assert [(h.base_offset, h.last_offset_delta, h.records_count) for h in rebuilt] == [
        (18, 5, 4),
        (24, 1, 2),
    ]
    assert_well_formed(log)
    await cleaner.shutdown()


async def test_log_append_time_batches_keep_their_timestamp(
    log_dir: str, scheduler: Scheduler
) -> None:
    log = open_log(log_dir, compacted(message_timestamp_type="LogAppendTime"), scheduler)
    put(log, [(b"a", b"1"), (b"b", b"1")])
    put(log, [(b"a", b"2")])
    log.roll()
    cleaner = cleaner_for(scheduler, log)
    assert await clean(cleaner, log) is not None
    header = batches(log)[0][0].header
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == BASE_TS and header.records_count == 1
    assert [(r.offset, r.timestamp) for r in log_records(log)] == [(1, BASE_TS), (2, BASE_TS)]
    await cleaner.shutdown()


async def test_the_last_batch_of_an_active_producer_is_kept_empty(
    log_dir: str, scheduler: Scheduler
) -> None:
    log = open_log(log_dir, compacted(), scheduler)
    put(log, [(b"a", b"1"), (b"b", b"1")], producer=(7, 0, 0))  # 0-1, superseded
    put(log, [(b"a", b"2")], producer=(7, 0, 2))  # 2, superseded: the producer's last
    # 3, superseded; producer 8's state expires (producer.id.expiration.ms, a day)
    put(log, [(b"c", b"1")], producer=(8, 3, 0), timestamp=BASE_TS - DAY)
    put(log, [(b"a", b"3"), (b"b", b"3"), (b"c", b"3")])  # 4-6
    log.roll()
    assert set(log.producer_state.active_producers) == {7, 8}
    log.producer_state.remove_expired_producers(BASE_TS + 10)
    assert set(log.producer_state.active_producers) == {7}
    cleaner = cleaner_for(scheduler, log)
    assert await clean(cleaner, log) is not None
    headers = [b.header for b, _ in batches(log)]
    empty = headers[0]
    # Kafka's writeEmptyHeader: offsets, producer id/epoch/sequence, epoch and max
    # timestamp kept; no records, no codec, baseTimestamp -1.
    assert (empty.base_offset, empty.last_offset, empty.records_count) == (2, 2, 0)
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (7, 0, 2)
    assert (empty.base_timestamp, empty.max_timestamp) == (NO_TIMESTAMP, BASE_TS)
    assert empty.size_in_bytes == 61 and empty.compression == 0
    assert [h.base_offset for h in headers] == [2, 4]
    assert [r.offset for r in log_records(log)] == [4, 5, 6]
    assert_well_formed(log)
    await cleaner.shutdown()


async def test_the_batch_ending_the_round_is_kept_empty(log_dir: str, scheduler: Scheduler) -> None:
    log = open_log(log_dir, compacted(delete_retention_ms=10), scheduler)
    put(log, [(b"a", b"1")])
    put(log, [(b"a", None)])
    log.roll()
    cleaner = cleaner_for(scheduler, log)
    assert await clean(cleaner, log, now=NOW) is not None
    assert [(b.header.base_offset, b.header.records_count) for b, _ in batches(log)] == [(1, 1)]
    # Past the horizon the tombstone goes, but its batch ends the round (its next offset
    # is the first uncleanable one): its header stays, so the offsets stay known.
    result = await clean(cleaner, log, now=NOW + 10)
    assert result is not None and result.end_offset == 2
    assert [(b.header.base_offset, b.header.records_count) for b, _ in batches(log)] == [(1, 0)]
    assert log_records(log) == []
    reopened = await reopen(log, scheduler)
    assert reopened.log_end_offset == 2
    await reopened.close()
    await cleaner.shutdown()


async def test_a_marker_whose_transaction_has_a_batch_left_is_kept_whole(
    log_dir: str, scheduler: Scheduler
) -> None:
    log = open_log(log_dir, compacted(), scheduler)
    put_txn(log, [(b"a", b"1")], 9, 0)
    end_txn(log, 9, ControlRecordType.COMMIT)
    marker = batches(log)[1][1]
    put(log, [(b"a", b"2")])
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    cleaner = cleaner_for(scheduler, log)
    assert await clean(cleaner, log) is not None
    # Producer 9's only data batch is superseded but is its last: kept empty. Its
    # transaction still has that batch, so its COMMIT marker stays as it was (Kafka's
    # CleanedTransactionMetadata), again on the next round.
    kept = [
        (b.header.base_offset, b.header.is_control, b.header.records_count) for b, _ in batches(log)
    ]
    assert kept == [(0, False, 0), (1, True, 1), (2, False, 1)]
    assert any(data == marker for _, data in batches(log))
    assert await clean(cleaner, log, now=NOW + 2 * DAY) is not None
    assert [data for _, data in batches(log)][1] == marker
    await cleaner.shutdown()


# -- which log, and how far ----------------------------------------------------------------


def fill(log: UnifiedLog, batches_: int, key_space: int = 3, value: bytes = b"v" * 40) -> None:
    for i in range(batches_):
        put(log, [(b"k%d" % (i % key_space), value)])


async def test_the_filthiest_log_above_the_dirty_ratio_is_cleaned(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    a = open_log(partition_dir(tmp_path, "a"), compacted(), scheduler)
    b = open_log(partition_dir(tmp_path, "b"), compacted(), scheduler)
    plain = open_log(partition_dir(tmp_path, "plain"), small_config(), scheduler)
    fill(a, 30)
    fill(plain, 30)
    for log in (a, b, plain):
        log.roll()
    cleaner = cleaner_for(scheduler, a, b, plain)
    offset_map = OffsetMap(1 << 20)
    assert await cleaner.clean_filthiest_log(offset_map)
    assert cleaner.checkpoints == {a.topic_partition: 30}
    # `a` keeps 3 single-record batches; 3 more make it exactly half dirty, which is
    # not above min.cleanable.dirty.ratio (0.5); `b` (wholly dirty) goes first.
    fill(a, 3)
    a.roll()
    fill(b, 30)
    b.roll()
    assert await cleaner.clean_filthiest_log(offset_map)
    assert cleaner.checkpoints[b.topic_partition] == 30
    assert not await cleaner.clean_filthiest_log(offset_map)
    fill(a, 1)
    a.roll()
    assert await cleaner.clean_filthiest_log(offset_map)
    assert cleaner.checkpoints[a.topic_partition] == 34
    assert [r.offset for r in log_records(a)] == [31, 32, 33]
    # The delete-policy log is never a candidate.
    assert plain.topic_partition not in cleaner.checkpoints
    assert len(log_records(plain)) == 30
    await cleaner.shutdown()


async def test_min_compaction_lag_and_high_watermark_bound_the_round(
    log_dir: str, scheduler: Scheduler
) -> None:
    log = open_log(log_dir, compacted(min_compaction_lag_ms=5_000), scheduler)
    fill(log, 6)  # old records
    log.roll()
    young = log.log_end_offset
    for i in range(6):
        put(log, [(b"k%d" % (i % 3), b"young")], timestamp=NOW - 1_000)
    log.roll()
    fill(log, 2)
    offsets = cleanable_offsets(log, None, NOW)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset) == (0, young)
    # Once the young segment is old enough, the active segment bounds the round...
    later = cleanable_offsets(log, None, NOW + 4_000)
    assert later.first_uncleanable_dirty_offset == log.active_segment.base_offset
    # ...and a high watermark inside the young segment bounds it at that segment.
    log.update_high_watermark(young + 2)
    assert cleanable_offsets(log, None, NOW + 4_000).first_uncleanable_dirty_offset == young + 2
    to_clean = LogToClean.of(log, 0, young + 2)
    assert to_clean.first_uncleanable_offset == young
    cleaner = cleaner_for(scheduler, log)
    result = await cleaner.clean_log(to_clean, OffsetMap(1 << 20), NOW, threading.Event())
    assert result is not None and result.end_offset == young
    kept = [r.offset for r in log_records(log)]
    assert kept == [3, 4, 5, *range(young, log.log_end_offset)]
    await cleaner.shutdown()


async def test_max_compaction_lag_forces_a_round_below_the_ratio(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    lagging = open_log(
        partition_dir(tmp_path, "lagging"), compacted(max_compaction_lag_ms=1_000), scheduler
    )
    patient = open_log(partition_dir(tmp_path, "patient"), compacted(), scheduler)
    for log in (lagging, patient):
        fill(log, 30)
        log.roll()
    cleaner = cleaner_for(scheduler, lagging, patient)
    offset_map = OffsetMap(1 << 20)
    assert await cleaner.clean_filthiest_log(offset_map)
    assert await cleaner.clean_filthiest_log(offset_map)
    for log in (lagging, patient):
        fill(log, 1)
        log.roll()
    assert LogToClean.of(patient, 30, 31).cleanable_ratio < 0.5
    # The dirty segment began at BASE_TS, long more than max.compaction.lag.ms ago.
    assert max_compaction_delay(lagging, 30, BASE_TS + 1_500) == 500
    assert max_compaction_delay(patient, 30, NOW) == 0
    assert await cleaner.clean_filthiest_log(offset_map)
    assert cleaner.checkpoints == {lagging.topic_partition: 31, patient.topic_partition: 30}
    assert not await cleaner.clean_filthiest_log(offset_map)
    # KIP-354: the active segment of such a log rolls after max.compaction.lag.ms.
    assert lagging.config.max_segment_ms == 1_000
    assert patient.config.max_segment_ms == patient.config.segment_ms
    await cleaner.shutdown()


async def test_a_full_offset_map_ends_the_round_early(log_dir: str, scheduler: Scheduler) -> None:
    log = open_log(log_dir, compacted(), scheduler)
    for i in range(40):
        put(log, [(b"k%d" % (i % 10), b"%02d" % i * 20)])
    log.roll()
    original = {r.offset: r for r in log_records(log)}
    uncleanable = log.active_segment.base_offset
    cleaner = cleaner_for(scheduler, log)
    # Room for three keys of two bytes below the load factor.
    offset_map = OffsetMap(int(3 * (2 + ENTRY_OVERHEAD) / 0.9))
    first_dirty, rounds = 0, 0
    while first_dirty < uncleanable:
        result = await clean(cleaner, log, first_dirty=first_dirty, offset_map=offset_map)
        assert result is not None and first_dirty < result.end_offset <= uncleanable
        assert offset_map.size <= 3
        after = log_records(log)
        # Beyond the round's end nothing changed; below it, each key at most once.
        assert [r for r in after if r.offset >= result.end_offset] == [
            r for o, r in original.items() if o >= result.end_offset
        ]
        below = [r.key for r in after if r.offset < result.end_offset]
        assert len(below) == len(set(below))
        assert all(original[r.offset] == r for r in after)
        first_dirty, rounds = result.end_offset, rounds + 1
    assert rounds == 14
    assert latest_by_key(log_records(log)) == latest_by_key(list(original.values()))
    assert len(log_records(log)) == 10
    await cleaner.shutdown()


def test_offset_map_counts_memory() -> None:
    offset_map = OffsetMap(1000)
    offset_map.put(b"abc", 5)
    offset_map.put(b"abc", 9)
    assert (offset_map.size, offset_map.get(b"abc"), offset_map.get(b"x")) == (1, 9, -1)
    assert offset_map.used_bytes == 3 + ENTRY_OVERHEAD
    assert offset_map.latest_offset == 9
    offset_map.update_latest_offset(20)
    assert offset_map.latest_offset == 20
    for i in range(6):
        offset_map.put(b"key%d" % i, 30 + i)
    assert offset_map.used_bytes == 124 + 6 * 125 < 900  # below the load factor
    offset_map.put(b"key6", 36)
    assert offset_map.is_full
    offset_map.clear()
    assert (offset_map.size, offset_map.used_bytes, offset_map.latest_offset) == (0, 0, -1)


def test_segments_are_grouped_by_size_and_offset_range(log_dir: str) -> None:
    @dataclass
    class Index:
        size_in_bytes: int

    @dataclass
    class Segment:
        base_offset: int
        size: int
        offset_index: Index = field(default_factory=lambda: Index(8))
        time_index: Index = field(default_factory=lambda: Index(12))

    segments: Any = [Segment(0, 400), Segment(10, 400), Segment(20, 400), Segment(30, 0)]
    groups = group_segments_by_size(segments, 1000, 100, 40)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20, 30]]
    assert [len(g) for g in group_segments_by_size(segments, 1000, 20, 40)] == [1, 1, 1, 1]
    # Offsets too far apart for 4-byte relative offsets start a new group.
    far: Any = [Segment(0, 10), Segment(2**31 - 5, 10), Segment(2**31 + 10, 10)]
    assert [len(g) for g in group_segments_by_size(far, 1000, 100, 2**31 + 20)] == [1, 2]


# -- the checkpoint ------------------------------------------------------------------------


async def test_cleaner_offset_checkpoint_is_written_and_read_back(
    log_dir: str, scheduler: Scheduler
) -> None:
    root = os.path.dirname(log_dir)
    log = open_log(log_dir, compacted(), scheduler)
    fill(log, 20)
    log.roll()
    cleaner = cleaner_for(scheduler, log)
    await cleaner.startup()
    assert await cleaner.clean_filthiest_log(OffsetMap(1 << 20))
    await cleaner.shutdown()
    path = os.path.join(root, CLEANER_OFFSET_CHECKPOINT_FILENAME)
    assert Path(path).read_text() == "0\n1\nt 0 20\n"  # Kafka's format
    # A new cleaner starts where the last one ended: nothing is dirty.
    again = cleaner_for(scheduler, log)
    await again.startup()
    assert again.checkpoints == {TP: 20}
    assert not await again.clean_filthiest_log(OffsetMap(1 << 20))
    await again.shutdown()
    # An entry past the log end (a truncated log) is reset to the log start, and the
    # entries of partitions that are gone are dropped when the file is rewritten.
    OffsetCheckpointFile(path).write({TP: 500, TopicPartition("gone", 3): 7})
    third = cleaner_for(scheduler, log)
    await third.startup()
    assert await third.clean_filthiest_log(OffsetMap(1 << 20))
    await third.shutdown()
    assert OffsetCheckpointFile(path).read() == {TP: 20}


async def test_a_truncation_makes_the_whole_log_dirty_again(
    log_dir: str, scheduler: Scheduler
) -> None:
    log = open_log(log_dir, compacted(), scheduler)
    fill(log, 20)
    log.roll()
    cleaner = cleaner_for(scheduler, log)
    offset_map = OffsetMap(1 << 20)
    assert await cleaner.clean_filthiest_log(offset_map)
    assert cleaner.checkpoints == {TP: 20}
    # A follower's truncation below the checkpoint, then new data past it: the cleaner
    # may not treat [18, 20) as clean, or both copies of b"dup" would stay.
    log.truncate_to(18)
    assert log.log_end_offset == 18
    put(log, [(b"dup", b"d")])
    put(log, [(b"dup", b"d")])
    fill(log, 9)
    log.roll()
    assert await cleaner.clean_filthiest_log(offset_map)
    assert cleaner.checkpoints == {TP: 29}
    assert [(r.offset, r.key) for r in log_records(log)] == [
        (19, b"dup"),
        (26, b"k0"),
        (27, b"k1"),
        (28, b"k2"),
    ]
    await cleaner.shutdown()


async def test_a_swap_is_refused_when_the_log_changed(log_dir: str, scheduler: Scheduler) -> None:
    log = open_log(log_dir, compacted(), scheduler)
    fill(log, 20)
    log.roll()
    fill(log, 2)
    before = log_records(log)
    cleaner = cleaner_for(scheduler, log)
    round_ = asyncio.ensure_future(clean(cleaner, log))
    await asyncio.sleep(0)  # the round is in the executor now
    log.truncate_to(21)
    assert await round_ is None
    assert log_records(log) == [r for r in before if r.offset < 21]
    assert not [n for n in os.listdir(log_dir) if n.endswith(".cleaned")]
    await cleaner.shutdown()


async def test_an_aborted_round_leaves_nothing(log_dir: str, scheduler: Scheduler) -> None:
    log = open_log(log_dir, compacted(), scheduler)
    fill(log, 20)
    log.roll()
    before = log_records(log)
    cleaner = cleaner_for(scheduler, log)
    abort = threading.Event()
    abort.set()
    to_clean = LogToClean.of(log, 0, log.active_segment.base_offset)
    from tiercel.storage.cleaner import LogCleaningAbortedError

    with pytest.raises(LogCleaningAbortedError):
        await cleaner.clean_log(to_clean, OffsetMap(1 << 20), NOW, abort)
    assert log_records(log) == before
    assert not [n for n in os.listdir(log_dir) if n.endswith(".cleaned")]
    await cleaner.shutdown()


def test_a_dedupe_buffer_too_small_for_the_threads_is_refused(log_dir: str) -> None:
    config = CleanerConfig(threads=4, dedupe_buffer_size=1000)
    with pytest.raises(ConfigError, match=r"log\.cleaner\.dedupe\.buffer\.size"):
        LogCleaner(config, [os.path.dirname(log_dir)], {}, None)  # type: ignore[arg-type]
    broker = BrokerConfig(
        {
            "log.cleaner.threads": 2,
            "log.cleaner.backoff.ms": 50,
            "log.cleaner.dedupe.buffer.size": 1 << 20,
            "log.cleaner.enable": False,
        }
    )
    assert CleanerConfig.from_broker(broker) == CleanerConfig(False, 2, 50, 1 << 20)
    assert CleanerConfig.from_broker(BrokerConfig({})) == CleanerConfig()


# -- crash safety ------------------------------------------------------------------------


class Crash(Exception):
    """The process dies here."""


@contextlib.contextmanager
def crash_after(renames: int, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Let the event loop's thread do ``renames`` renames, then die at the next one
    (executor threads are not counted: the swap renames on the loop only)."""
    done = [0]

    def counting(real: Callable[..., None]) -> Callable[..., None]:
        def rename(*args: Any, **kwargs: Any) -> None:
            if threading.current_thread() is threading.main_thread():
                if done[0] == renames:
                    raise Crash
                done[0] += 1
            real(*args, **kwargs)

        return rename

    with monkeypatch.context() as patch:
        patch.setattr(os, "rename", counting(os.rename))
        patch.setattr(os, "replace", counting(os.replace))
        yield done


async def crash_scenario(directory: str, scheduler: Scheduler) -> list[Stored]:
    """Three full segments, one group each when cleaned: the first is wholly
    superseded (its cleaned segment is empty), the others keep some records."""
    log = open_log(directory, compacted(), scheduler)
    for generation in range(3):
        keys = b"abcde" if generation < 2 else b"abf"
        for key in keys:
            put(log, [(bytes([key]), b"%d" % generation * 130)])
        log.roll()
    put(log, [(b"x", b"active")])
    assert [s.size > 512 for s in log.segments] == [True, True, True, False]
    records = log_records(log)
    await log.close()
    return records


async def test_a_crash_at_any_step_of_the_swap_loses_and_duplicates_nothing(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = partition_dir(tmp_path / "template")
    before = await crash_scenario(template, scheduler)
    view = latest_by_key(before)
    complete_after: list[Stored] | None = None
    renames = 0
    while complete_after is None:
        directory = partition_dir(tmp_path / f"crash{renames}")
        for name in os.listdir(template):
            Path(directory, name).write_bytes(Path(template, name).read_bytes())
        log = open_log(directory, compacted(), scheduler)
        log.update_high_watermark(log.log_end_offset)
        cleaner = cleaner_for(scheduler, log)
        crashed = False
        with crash_after(renames, monkeypatch):
            try:
                await clean(cleaner, log)
            except Crash:
                crashed = True
        if crashed:
            for segment in log.segments:
                segment.close()  # the process is gone; nothing more reaches the disk
        else:
            complete_after = log_records(log)
            await log.close()
        await cleaner.shutdown()
        await asyncio.sleep(0)
        await scheduler.drain()
        loaded = open_log(directory, compacted(), scheduler)
        after = log_records(loaded)
        # Nothing lost: the same latest record per key; nothing duplicated: offsets
        # strictly increase; every record is the one first written at its offset.
        assert latest_by_key(after) == view, renames
        assert_well_formed(loaded)
        originals = {r.offset: r for r in before}
        assert all(originals[r.offset] == r for r in after)
        assert not [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]
        await loaded.close()
        renames += 1
    # 3 groups: 3 renames to .swap, 3 of the old files to .deleted, 3 to the final names.
    assert renames == 28
    assert [r.offset for r in complete_after] == [7, 8, 9, 10, 11, 12, 13]


async def test_a_crash_while_writing_cleaned_files_leaves_the_log_as_it_was(
    log_dir: str, scheduler: Scheduler
) -> None:
    before = await crash_scenario(log_dir, scheduler)
    for suffix, data in ((".log.cleaned", b"\x00" * 70), (".index.cleaned", b"\x00" * 5)):
        Path(log_dir, "00000000000000000000" + suffix).write_bytes(data)
    loaded = open_log(log_dir, compacted(), scheduler)
    assert log_records(loaded) == before
    assert not [n for n in os.listdir(log_dir) if ".cleaned" in n]
    await loaded.close()


async def test_an_interrupted_swap_of_an_emptied_segment_is_completed(
    log_dir: str, scheduler: Scheduler
) -> None:
    """The swap file of an emptied segment has no offsets: the old files named after
    its base offset still go (not only Kafka's [base, next offset) range)."""
    before = await crash_scenario(log_dir, scheduler)
    Path(log_dir, "00000000000000000000.log.swap").write_bytes(b"")
    Path(log_dir, "00000000000000000000.timeindex.swap").write_bytes(b"")
    loaded = open_log(log_dir, compacted(), scheduler)
    assert [r.offset for r in log_records(loaded)] == [r.offset for r in before][5:]
    assert loaded.segments[0].size == 0 and loaded.segments[0].offset_index.entries == 0
    await loaded.close()


# -- in the LogManager -------------------------------------------------------------------


async def test_the_log_manager_runs_the_cleaner(tmp_path: Path, scheduler: Scheduler) -> None:
    settings = {"log.dirs": [str(tmp_path)], "log.cleaner.backoff.ms": 20}
    config = compacted()
    manager = LogManager(BrokerConfig(settings), scheduler, lambda topic: config)
    await manager.startup(None)
    log = manager.get_or_create_log(TP, config, None)
    fill(log, 30)
    log.roll()
    for _ in range(200):
        if manager.cleaner.checkpoints.get(TP) == 30:
            break
        await asyncio.sleep(0.02)
    assert [r.offset for r in log_records(log)] == [27, 28, 29]
    await manager.shutdown()
    checkpoint = OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT_FILENAME)
    assert checkpoint.read() == {TP: 30}
    await asyncio.sleep(0)
    await scheduler.drain()
    again = LogManager(BrokerConfig(settings), scheduler, lambda topic: config)
    await again.startup(None)
    reloaded = again.get_log(TP)
    assert reloaded is not None and [r.offset for r in log_records(reloaded)] == [27, 28, 29]
    assert again.cleaner.checkpoints == {TP: 30}
    again.delete_log(TP, "test")
    assert again.cleaner.checkpoints == {}
    await again.shutdown()
    assert checkpoint.read() == {}


# -- a model -------------------------------------------------------------------------------

RETENTION = 1_000
KEYS = [b"k%d" % i for i in range(8)]
appends = st.tuples(
    st.just("append"),
    st.lists(st.tuples(st.integers(0, 7), st.booleans()), min_size=1, max_size=6),
    st.sampled_from([CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD]),
)
# (clean, late: past every horizon set so far, small map: three keys, roll first)
rounds = st.tuples(st.just("clean"), st.booleans(), st.booleans(), st.booleans())
# Half appends, three in ten rounds, then rolls and reopens.
operation = st.integers(0, 9).flatmap(
    lambda n: (
        appends
        if n < 5
        else rounds
        if n < 8
        else st.just(("roll",))
        if n < 9
        else st.just(("reopen",))
    )
)
operations = st.lists(operation, min_size=10, max_size=40)


@dataclass
class Model:
    """What the log should hold: every record ever written (offset -> key, value), the
    offsets still alive, the delete horizon seen on each tombstone's batch, the clock."""

    written: dict[int, Entry] = field(default_factory=dict)
    alive: set[int] = field(default_factory=set)
    horizons: dict[int, int] = field(default_factory=dict)
    first_dirty: int = 0
    now: int = NOW

    def clean(self, end: int) -> None:
        """Kafka's rules over records, not batches: the key's latest offset in the dirty
        section [first dirty, end) wins; a tombstone goes once its horizon has passed."""
        latest = {self.written[o][0]: o for o in sorted(self.alive) if self.first_dirty <= o < end}
        for offset in sorted(self.alive):
            key, value = self.written[offset]
            if offset >= end:
                continue
            superseded = offset < latest.get(key, -1)
            expired = value is None and self.now >= self.horizons.get(offset, self.now + 1)
            if superseded or expired:
                self.alive.discard(offset)
        self.first_dirty = end


async def run_model(directory: str, ops: list[tuple[Any, ...]]) -> None:
    scheduler = Scheduler(asyncio.get_running_loop(), 2)
    config = compacted(segment_bytes=600, index_interval_bytes=100, delete_retention_ms=RETENTION)
    log = open_log(directory, config, scheduler)
    cleaner = cleaner_for(scheduler, log)
    model = Model()
    try:
        for op in ops:
            if op[0] == "append":
                entries = [(KEYS[k], None if dead else b"v%d" % k * 8) for k, dead in op[1]]
                info = put(log, entries, codec=op[2])
                offsets = range(info.first_offset, info.last_offset + 1)
                model.written.update(zip(offsets, entries, strict=True))
                model.alive.update(offsets)
            elif op[0] == "roll":
                log.roll()
            elif op[0] == "reopen":
                log = await reopen(log, scheduler)
                log.update_high_watermark(log.log_end_offset)
                cleaner = cleaner_for(scheduler, log)
            else:
                if op[3]:
                    log.roll()
                await model_round(log, cleaner, model, late=op[1], small_map=op[2])
            assert_matches(log, model)
        await log.close()
    finally:
        await cleaner.shutdown()
        await scheduler.drain()
        scheduler.shutdown()


async def model_round(
    log: UnifiedLog, cleaner: LogCleaner, model: Model, *, late: bool, small_map: bool
) -> None:
    model.now += RETENTION if late else 1
    offsets = cleanable_offsets(log, model.first_dirty, model.now)
    to_clean = LogToClean.of(
        log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset
    )
    if to_clean.cleanable_bytes == 0:
        return
    memory = int(3 * (2 + ENTRY_OVERHEAD) / 0.9) if small_map else 1 << 20
    result = await cleaner.clean_log(to_clean, OffsetMap(memory), model.now, threading.Event())
    assert result is not None
    assert model.first_dirty < result.end_offset <= to_clean.first_uncleanable_offset
    if not small_map:
        assert result.end_offset == to_clean.first_uncleanable_offset
    model.clean(result.end_offset)
    # Every tombstone kept below the end now has a horizon, set by this round or before;
    # a horizon once set never moves.
    for batch, _ in batches(log):
        header = batch.header
        if header.has_delete_horizon:
            for offset in range(header.base_offset, header.last_offset + 1):
                assert model.horizons.setdefault(offset, header.base_timestamp) in (
                    header.base_timestamp,
                )
            assert header.base_timestamp <= model.now + RETENTION
    for offset in model.alive:
        if offset < result.end_offset and model.written[offset][1] is None:
            assert offset in model.horizons


def assert_matches(log: UnifiedLog, model: Model) -> None:
    stored = log_records(log)
    assert [r.offset for r in stored] == sorted(model.alive)
    assert all((r.key, r.value) == model.written[r.offset] for r in stored)
    below = [r.key for r in stored if r.offset < model.first_dirty]
    assert len(below) == len(set(below)), "a key twice in the cleaned section"


@given(operations)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_compaction_matches_a_model(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(run_model(partition_dir(root), ops))


# -- transactions ----------------------------------------------------------------------


def put_txn(log: UnifiedLog, entries: Sequence[Entry], producer_id: int, seq: int) -> None:
    """One transactional batch of ``producer_id`` (epoch 0), appended as leader."""
    records = [SimpleRecord(k, v, timestamp=BASE_TS) for k, v in entries]
    data = build_record_batch(
        records, producer_id=producer_id, producer_epoch=0, base_sequence=seq,
        is_transactional=True,
    )  # fmt: skip
    log.append_as_leader(validate_records(data, log.config, BASE_TS), 0, BASE_TS)


def end_txn(log: UnifiedLog, producer_id: int, control: ControlRecordType) -> None:
    batch = end_txn_marker_append_batch(
        EndTransactionMarker(control, 0), producer_id, 0, log.log_end_offset, 0, log.config, NOW
    )
    log.append([batch], AppendOrigin.COORDINATOR)
    log.update_high_watermark(log.log_end_offset)


async def test_aborted_records_never_shadow_committed_ones_and_open_ones_wait(
    log_dir: str, scheduler: Scheduler
) -> None:
    log = open_log(log_dir, compacted(), scheduler)
    put(log, [(b"a", b"committed"), (b"b", b"committed")])
    put_txn(log, [(b"a", b"aborted")], 7, 0)
    end_txn(log, 7, ControlRecordType.ABORT)
    put_txn(log, [(b"b", b"committed by 8")], 8, 0)
    end_txn(log, 8, ControlRecordType.COMMIT)
    log.roll()
    put_txn(log, [(b"b", b"still open")], 9, 0)  # undecided: beyond the LSO
    log.update_high_watermark(log.log_end_offset)
    log.roll()
    put(log, [(b"c", b"active")])
    aborted_before = [e for s in log.segments for e in s.txn_index.entries]
    assert aborted_before == [AbortedTxn(7, 2, 3, 4)]
    assert log.last_stable_offset == 6
    cleaner = cleaner_for(scheduler, log)

    result = await clean(cleaner, log)

    assert result is not None and result.end_offset == 6
    kept = {(r.offset, r.key, r.value) for r in log_records(log)}
    # "a" keeps its committed value (the aborted one put no key in the map and is
    # dropped); "b" keeps the value committed by producer 8; the open one is untouched.
    assert (0, b"a", b"committed") in kept
    assert (2, b"a", b"aborted") not in kept
    assert (1, b"b", b"committed") not in kept
    assert {(4, b"b", b"committed by 8"), (6, b"b", b"still open")} <= kept
    # Markers and the aborted transaction's index entry survive the swap.
    assert [e for s in log.segments for e in s.txn_index.entries] == aborted_before
    markers = [b.header.base_offset for b, _ in batches(log) if b.header.is_control]
    assert markers == [3, 5]
    assert_well_formed(log)
    await cleaner.shutdown()
