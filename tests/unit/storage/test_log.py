"""UnifiedLog: offsets and epochs on append, reads, rolling, timestamp lookups, truncation,
retention, flushing, and a model-based property over appends/rolls/truncations/reopens."""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_support import (
    BASE_TS,
    Stored,
    batch_bytes,
    brute_force_positions,
    decode_all,
    log_records,
    open_log,
    partition_dir,
    produce,
    small_config,
)

from tiercel.config.log_config import LogConfig
from tiercel.protocol.compression import CompressionType
from tiercel.protocol.errors import OffsetOutOfRangeError
from tiercel.protocol.record_batch import TimestampType, is_crc_valid, read_header
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.file_names import DELETED_FILE_SUFFIX, filename_prefix_from_offset
from tiercel.storage.log_validator import assign_offsets, validate_records
from tiercel.storage.log_values import FetchIsolation, LogOffsetMetadata
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog

LOG_END = FetchIsolation.LOG_END
HW = FetchIsolation.HIGH_WATERMARK


def value(i: int, size: int = 30) -> bytes:
    return (b"%05d" % i) * (size // 5)


def fill(log: UnifiedLog, batches: int, per_batch: int = 2, epoch_every: int = 0) -> None:
    """Append `batches` batches of `per_batch` records; record n has timestamp BASE_TS + n."""
    for _ in range(batches):
        start = log.log_end_offset
        offsets = range(start, start + per_batch)
        epoch = start // epoch_every if epoch_every else 0
        produce(log, [value(o) for o in offsets], [BASE_TS + o for o in offsets], epoch=epoch)


def make_log(tmp_path: Path, scheduler: Scheduler, **overrides: object) -> UnifiedLog:
    return open_log(partition_dir(tmp_path), small_config(**overrides), scheduler)


def segment_names(log: UnifiedLog) -> list[str]:
    return sorted(n for n in os.listdir(log.dir) if n.endswith(".log"))


async def settle(scheduler: Scheduler) -> None:
    """Let background work due now (removals after a zero delay, flushes) finish."""
    await asyncio.sleep(0.01)  # timers due now fire and start their work
    await scheduler.drain()


# -- append ------------------------------------------------------------------------------


async def test_appends_assign_dense_offsets_from_the_log_end(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler)
    assert log.log_end_offset == 0
    first = produce(log, [b"a", b"b", b"c"])
    assert (first.first_offset, first.last_offset, first.num_messages) == (0, 2, 3)
    # the offsets and the epoch are the leader's, whatever the producer wrote
    raw = build_record_batch(
        [SimpleRecord(b"k", b"d"), SimpleRecord(b"k", b"e")], partition_leader_epoch=42
    )
    second = log.append_as_leader(validate_records(raw, log.config, BASE_TS), 0, BASE_TS)
    assert (second.first_offset, second.last_offset, second.next_offset) == (3, 4, 5)
    assert second.valid_bytes == len(raw)
    assert log.log_end_offset == 5
    assert log.log_end_offset_metadata == LogOffsetMetadata(5, 0, log.active_segment.size)
    stored = log_records(log)
    assert [(r.offset, r.value) for r in stored] == list(enumerate([b"a", b"b", b"c", b"d", b"e"]))
    headers = [b.header for b in log.active_segment.batches_from(0)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 0), (3, 0)]
    await log.close()


async def test_leader_epoch_stamped_in_batches_and_cached(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler)
    for epoch, count in [(0, 2), (0, 3), (3, 1), (3, 2), (7, 4)]:
        produce(log, [b"x"] * count, epoch=epoch)
    epochs = [
        (b.header.base_offset, b.header.partition_leader_epoch)
        for s in log.segments
        for b in s.batches_from(0)
    ]
    assert epochs == [(0, 0), (2, 0), (5, 3), (6, 3), (8, 7)]
    assert log.leader_epoch_cache.entries == (EpochEntry(0, 0), EpochEntry(3, 5), EpochEntry(7, 8))
    assert log.epoch_for_offset(6) == 3
    assert log.end_offset_for_epoch(3) == (3, 8)
    assert log.end_offset_for_epoch(7) == (7, 12)
    await log.flush_epoch_checkpoint()
    text = (Path(log.dir) / "leader-epoch-checkpoint").read_text()
    assert text == "0\n3\n0 0\n3 5\n7 8\n"
    # each stamped batch still passes its CRC check
    for segment in log.segments:
        for batch in segment.batches_from(0):
            assert is_crc_valid(segment.read_batch(batch), 0, batch.header)
    await log.close()


# -- reads -------------------------------------------------------------------------------


async def test_read_from_any_offset_returns_the_batch_holding_it(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler)
    fill(log, 30, per_batch=3)
    log.update_high_watermark(log.log_end_offset)
    assert len(log.segments) > 3
    for offset in range(log.log_end_offset):
        info = log.read(offset, 1 << 20, LOG_END, False)
        got = decode_all(bytes(info.records))
        assert got[0].offset == offset - offset % 3
        assert info.fetch_offset_metadata.message_offset == offset
        # a read stays within one segment, up to its end
        segment = [s for s in log.segments if s.base_offset <= offset][-1]
        assert got[-1].offset == segment.next_offset() - 1
        assert info.fetch_offset_metadata.segment_base_offset == segment.base_offset
    await log.close()


async def test_read_max_bytes_and_min_one_message(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler, segment_bytes=1 << 20)
    fill(log, 10, per_batch=4)
    log.update_high_watermark(log.log_end_offset)
    batch_size = read_header(log.read(0, 100, LOG_END, True).records, 0).size_in_bytes
    assert log.read(0, 10, LOG_END, False).size == 0  # no fragment of the first batch
    whole = log.read(0, 10, LOG_END, True)
    assert whole.size == batch_size
    assert [r.offset for r in decode_all(bytes(whole.records))] == [0, 1, 2, 3]
    three = log.read(5, 3 * batch_size, HW, True)
    assert [r.offset for r in decode_all(bytes(three.records))] == list(range(4, 16))
    partial = log.read(5, 3 * batch_size - 1, HW, False)
    assert partial.size == 3 * batch_size - 1
    assert [r.offset for r in decode_all(bytes(partial.records))] == list(range(4, 12))
    await log.close()


async def test_reads_are_bounded_by_the_high_watermark(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler)
    fill(log, 20, per_batch=2)  # several segments
    assert log.high_watermark == 0
    assert log.read(0, 1 << 20, HW, True).size == 0
    log.update_high_watermark(14)
    for start in range(0, 14):
        got = decode_all(bytes(log.read(start, 1 << 20, HW, True).records))
        assert got and got[-1].offset <= 13
        assert (
            got[-1].offset == 13
            or got[-1].offset
            == max(s.next_offset() for s in log.segments if s.base_offset <= start) - 1
        )
    for start in range(14, log.log_end_offset):
        assert log.read(start, 1 << 20, HW, True).size == 0
        assert log.read(start, 1 << 20, LOG_END, True).size > 0
    # the high watermark in the middle of a batch excludes that batch
    log.update_high_watermark(17)
    got = decode_all(bytes(log.read(14, 1 << 20, HW, True).records))
    assert [r.offset for r in got] == [14, 15]
    await log.close()


async def test_read_out_of_range(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler)
    fill(log, 20)
    log.update_high_watermark(40)
    end = log.log_end_offset
    assert log.read(end, 100, LOG_END, True).size == 0
    assert log.read(end, 100, HW, True).size == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(end + 1, 100, LOG_END, True)
    log.maybe_increment_log_start_offset(10)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(9, 100, LOG_END, True)
    got = decode_all(bytes(log.read(10, 100, HW, True).records))
    assert got[0].offset == 10
    await log.close()


async def test_roll_on_segment_bytes(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler, segment_bytes=600)
    fill(log, 40)
    segments = log.segments
    assert len(segments) > 5
    assert all(0 < s.size <= 600 for s in segments)
    assert [s.base_offset for s in segments[1:]] == [s.next_offset() for s in segments[:-1]]
    assert segment_names(log) == [
        f"{filename_prefix_from_offset(s.base_offset)}.log" for s in segments
    ]
    assert all(len(name) == len("00000000000000000000.log") for name in segment_names(log))
    assert [r.offset for r in log_records(log)] == list(range(80))
    await log.close()


async def test_roll_on_segment_ms(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler, segment_bytes=1 << 20, segment_ms=5)
    for i, ts in enumerate([0, 3, 5, 6, 20, 25, 26]):
        produce(log, [value(i)], [BASE_TS + ts])
    # a segment rolls once a batch is > segment.ms after its segment's first batch
    assert [s.base_offset for s in log.segments] == [0, 3, 4, 6]
    await log.close()


async def test_roll_on_full_index(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(
        tmp_path, scheduler, segment_bytes=1 << 20, segment_index_bytes=48, index_interval_bytes=1
    )
    fill(log, 30, per_batch=1)
    assert len(log.segments) > 5
    for segment in log.segments:
        assert segment.offset_index.entries <= 6
        assert segment.time_index.entries <= 3
    assert [r.offset for r in log_records(log)] == list(range(30))
    await log.close()


async def test_multi_batch_append_that_fills_the_index(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    # A follower-style append of many batches into a segment whose index has room for
    # only a few entries: the roll check ran before the append, the rest stays unindexed.
    log = make_log(
        tmp_path, scheduler, segment_bytes=1 << 20, segment_index_bytes=48, index_interval_bytes=1
    )
    raw = b"".join(batch_bytes([value(i)], [BASE_TS + i]) for i in range(10))
    validated = validate_records(raw, log.config, BASE_TS, single_batch=False)
    batches, _, _ = assign_offsets(validated, 0, 0, "CreateTime", BASE_TS)
    log.append(batches)
    assert log.log_end_offset == 10
    assert log.active_segment.size == len(raw) == os.path.getsize(log.active_segment.log_path)
    for offset in range(10):
        got = decode_all(bytes(log.read(offset, 1, LOG_END, True).records))
        assert [r.offset for r in got] == [offset]
    produce(log, [b"next"])  # the full index makes the next append roll
    assert [s.base_offset for s in log.segments] == [0, 10]
    await log.close()


async def test_explicit_roll(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler)
    assert log.roll() is log.active_segment  # an empty active segment is kept
    fill(log, 2)
    new = log.roll()
    assert new.base_offset == 4 == log.log_end_offset
    assert log.roll() is new
    assert log.log_end_offset_metadata == LogOffsetMetadata(4, 4, 0)
    produce(log, [b"x"])
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert segment_names(log) == ["00000000000000000000.log", "00000000000000000004.log"]
    await log.close()


async def test_indexes_are_sparse_and_point_at_batches(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler, segment_bytes=4000, index_interval_bytes=300)
    fill(log, 60, per_batch=2)
    for segment in log.segments:
        positions = brute_force_positions(segment)
        entries = [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)]
        assert entries, "each segment is large enough for an entry"
        for entry in entries:
            assert positions[entry.offset] == entry.position
        gaps = [b.position - a.position for a, b in itertools.pairwise(entries)]
        assert all(gap > 300 for gap in gaps)
        # and no sparser: the first batch past the interval gets the next entry
        batch = next(iter(segment.batches_from(0))).size
        assert all(gap <= 300 + 2 * batch for gap in gaps)
        times = [segment.time_index.entry(i) for i in range(segment.time_index.entries)]
        for entry in times:
            assert entry.offset in positions
            assert entry.timestamp == BASE_TS + entry.offset
    await log.close()


# -- timestamps -------------------------------------------------------------------------


def first_at_or_after(stored: list[Stored], target: int, start: int) -> tuple[int, int] | None:
    for record in stored:
        if record.offset >= start and record.timestamp >= target:
            return record.timestamp, record.offset
    return None


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
async def test_fetch_offset_by_timestamp(
    tmp_path: Path, scheduler: Scheduler, codec: CompressionType
) -> None:
    log = make_log(tmp_path, scheduler, segment_bytes=700, index_interval_bytes=150)
    # timestamps go up and down inside and across batches
    stamps = [(i * 37) % 101 for i in range(120)]
    for start in range(0, 120, 4):
        produce(
            log,
            [value(o) for o in range(start, start + 4)],
            [BASE_TS + t for t in stamps[start : start + 4]],
            compression=codec,
            epoch=start // 40,
        )
    assert len(log.segments) > 3
    stored = log_records(log)
    for target in [-5, 0, 1, 17, 50, 99, 100, 101]:
        found = await log.fetch_offset_by_timestamp(BASE_TS + target)
        expected = first_at_or_after(stored, BASE_TS + target, 0)
        if expected is None:
            assert found is None
        else:
            assert found is not None
            assert (found.timestamp, found.offset) == expected, target
            assert found.leader_epoch == found.offset // 40
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(30)
    found = await log.fetch_offset_by_timestamp(BASE_TS)
    assert found is not None
    assert (found.timestamp, found.offset) == first_at_or_after(stored, BASE_TS, 30)
    best = await log.fetch_max_timestamp()
    assert best is not None
    assert (best.timestamp, best.offset) == (BASE_TS + 100, stamps.index(100))
    await log.close()


async def test_timestamp_lookups_with_log_append_time(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler, message_timestamp_type="LogAppendTime", segment_bytes=300)
    for i in range(10):
        produce(log, [b"a", b"b", b"c"], [1, 2, 3], now_ms=BASE_TS + 10 * i)
    assert len(log.segments) > 2
    for segment in log.segments:
        for batch in segment.batches_from(0):
            assert batch.header.timestamp_type is TimestampType.LOG_APPEND_TIME
            assert batch.header.max_timestamp == BASE_TS + 10 * (batch.header.base_offset // 3)
    found = await log.fetch_offset_by_timestamp(BASE_TS + 41)
    assert found is not None and (found.timestamp, found.offset) == (BASE_TS + 50, 15)
    found = await log.fetch_offset_by_timestamp(BASE_TS + 50)
    assert found is not None and found.offset == 15
    assert await log.fetch_offset_by_timestamp(BASE_TS + 91) is None
    best = await log.fetch_max_timestamp()  # the first record carrying it (KAFKA-16310)
    assert best is not None and (best.timestamp, best.offset) == (BASE_TS + 90, 27)
    await log.close()


async def test_fetch_max_timestamp_of_empty_log(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler)
    assert await log.fetch_max_timestamp() is None
    assert await log.fetch_offset_by_timestamp(0) is None
    await log.close()


# -- truncation -----------------------------------------------------------------------------


def assert_consistent(log: UnifiedLog) -> None:
    """Everything derivable from the segments agrees with the log's own state."""
    stored = log_records(log)
    end = log.log_end_offset
    assert [r.offset for r in stored] == list(range(log.segments[0].base_offset, end))
    assert log.log_start_offset <= log.high_watermark <= end
    assert log.recovery_point <= end
    assert all(e.start_offset < end for e in log.leader_epoch_cache.entries)
    for segment in log.segments:
        positions = brute_force_positions(segment)
        for i in range(segment.offset_index.entries):
            entry = segment.offset_index.entry(i)
            assert positions[entry.offset] == entry.position
        for i in range(segment.time_index.entries):
            assert segment.time_index.entry(i).offset in positions
        assert segment.size == os.path.getsize(segment.log_path)
    live = [f"{filename_prefix_from_offset(s.base_offset)}.log" for s in log.segments]
    assert segment_names(log) == live


async def test_truncate_mid_segment(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler)
    fill(log, 30, per_batch=2, epoch_every=20)
    log.update_high_watermark(55)
    await log.flush()
    assert log.recovery_point == 60
    bases = [s.base_offset for s in log.segments]
    cut = bases[1] + 5  # inside the batch [base+4, base+5]
    assert log.truncate_to(cut)
    assert log.log_end_offset == cut - 1
    assert log.high_watermark == cut - 1
    assert log.recovery_point == cut - 1
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert log.leader_epoch_cache.entries == (EpochEntry(0, 0),)
    active = log.active_segment
    assert all(
        active.time_index.entry(i).offset < cut - 1 for i in range(active.time_index.entries)
    )
    assert active.max_timestamp_so_far == BASE_TS + cut - 2
    assert_consistent(log)
    await settle(scheduler)
    assert not any(n.endswith(DELETED_FILE_SUFFIX) for n in os.listdir(log.dir))
    info = produce(log, [b"new"], [BASE_TS + 1000], epoch=5)
    assert info.first_offset == cut - 1
    assert log.leader_epoch_cache.entries == (EpochEntry(0, 0), EpochEntry(5, cut - 1))
    assert log_records(log)[-1] == Stored(cut - 1, BASE_TS + 1000, b"knew", b"new")
    await log.flush_epoch_checkpoint()
    assert (Path(log.dir) / "leader-epoch-checkpoint").read_text() == f"0\n2\n0 0\n5 {cut - 1}\n"
    await log.close()


async def test_truncate_at_a_segment_boundary(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler)
    fill(log, 30, per_batch=2, epoch_every=20)
    log.update_high_watermark(60)
    boundary = log.segments[2].base_offset
    assert not log.truncate_to(60)
    assert log.truncate_to(boundary)
    assert log.log_end_offset == boundary
    assert log.segments[-1].next_offset() == boundary
    assert [r.offset for r in log_records(log)] == list(range(boundary))
    assert log.high_watermark == boundary
    assert_consistent(log)
    assert log.read(boundary, 100, LOG_END, True).size == 0
    fill(log, 3)
    assert [r.offset for r in log_records(log)] == list(range(boundary + 6))
    assert_consistent(log)
    await log.close()


async def test_truncate_below_log_start_restarts_the_log(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler, file_delete_delay_ms=100_000)
    fill(log, 30, epoch_every=20)
    log.update_high_watermark(60)
    log.maybe_increment_log_start_offset(40)
    old_segments = len(log.segments)
    assert log.truncate_to(25)
    assert [s.base_offset for s in log.segments] == [25]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (25, 25, 25)
    assert log.recovery_point == 25
    assert log.leader_epoch_cache.entries == ()
    assert log_records(log) == []
    assert segment_names(log) == ["00000000000000000025.log"]
    deleted = [n for n in os.listdir(log.dir) if n.endswith(".log" + DELETED_FILE_SUFFIX)]
    assert len(deleted) == old_segments
    info = produce(log, [b"a", b"b"], epoch=9)
    assert (info.first_offset, info.last_offset) == (25, 26)
    assert log.leader_epoch_cache.entries == (EpochEntry(9, 25),)
    assert_consistent(log)
    await log.close()


async def test_truncate_inside_the_batch_holding_the_log_start(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler)
    produce(log, [b"a", b"b", b"c", b"d"])  # one batch, offsets 0-3
    log.roll()
    produce(log, [b"e"])
    log.update_high_watermark(5)
    log.maybe_increment_log_start_offset(1)  # DeleteRecords into the batch
    assert log.truncate_to(2)  # above the log start, inside the same batch
    assert log.log_end_offset == 0  # the whole batch went
    assert log.log_start_offset == 0  # so the start follows the end down
    assert log.high_watermark == 0
    info = produce(log, [b"x"])
    assert info.first_offset == 0
    assert [r.offset for r in decode_all(bytes(log.read(0, 1000, LOG_END, True).records))] == [0]
    await log.close()


async def test_truncate_fully_and_start_at(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler)
    fill(log, 10)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1000, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 10, LOG_END, True)
    produce(log, [b"x"])
    assert [r.offset for r in log_records(log)] == [1000]
    await settle(scheduler)
    assert segment_names(log) == ["00000000000000001000.log"]
    await log.close()


# -- retention ------------------------------------------------------------------------------


async def test_retention_by_time_stops_at_the_high_watermark(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler, retention_ms=1000, file_delete_delay_ms=200)
    fill(log, 30, epoch_every=20)
    bases = [s.base_offset for s in log.segments]
    assert log.delete_old_segments() == 0  # HW 0: nothing is deletable
    log.update_high_watermark(bases[2])
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == bases[2:]
    assert log.log_start_offset == bases[2]
    names = os.listdir(log.dir)
    for base in bases[:2]:
        prefix = filename_prefix_from_offset(base)
        assert {n for n in names if n.startswith(prefix)} == {
            f"{prefix}.log.deleted",
            f"{prefix}.index.deleted",
            f"{prefix}.timeindex.deleted",
        }
    await settle(scheduler)
    assert any(n.endswith(DELETED_FILE_SUFFIX) for n in os.listdir(log.dir))  # 200 ms later
    for _ in range(300):
        await asyncio.sleep(0.01)
        if not any(n.endswith(DELETED_FILE_SUFFIX) for n in os.listdir(log.dir)):
            break
    assert not any(n.endswith(DELETED_FILE_SUFFIX) for n in os.listdir(log.dir))
    assert_consistent(log)
    await log.close()


async def test_retention_rolls_the_active_segment_when_all_expired(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler, retention_ms=1000)
    fill(log, 30, epoch_every=20)
    count = len(log.segments)
    log.update_high_watermark(60)
    assert log.delete_old_segments() == count
    assert [s.base_offset for s in log.segments] == [60]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (60, 60, 60)
    assert log.leader_epoch_cache.entries == (EpochEntry(2, 60),)
    assert log.read(60, 100, HW, True).size == 0
    assert log.delete_old_segments() == 0  # the empty active segment stays
    await settle(scheduler)
    assert segment_names(log) == ["00000000000000000060.log"]
    info = produce(log, [b"x"], epoch=2)
    assert info.first_offset == 60
    await log.close()


async def test_retention_by_size(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler, retention_bytes=2500)
    fill(log, 30)
    log.update_high_watermark(60)
    sizes = [s.size for s in log.segments]
    # Kafka's rule: drop the oldest segments while the log stays at or above retention.bytes
    excess = sum(sizes) - 2500
    expected = 0
    for size in sizes:
        if excess - size < 0:
            break
        excess -= size
        expected += 1
    assert expected > 0
    assert log.delete_old_segments() == expected
    assert log.size == sum(sizes[expected:]) >= 2500
    assert log.size - log.segments[0].size < 2500
    assert log.delete_old_segments() == 0
    await log.close()


async def test_retention_by_log_start_offset(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler)
    fill(log, 30)
    log.update_high_watermark(30)
    with pytest.raises(OffsetOutOfRangeError):  # DeleteRecords beyond the HW
        log.maybe_increment_log_start_offset(31)
    second = log.segments[1].base_offset
    # DeleteRecords to the middle of a batch in the second segment
    assert log.maybe_increment_log_start_offset(second + 1)
    assert not log.maybe_increment_log_start_offset(5)
    assert log.log_start_offset == second + 1
    assert log.delete_old_segments() == 1  # only the segment wholly below the start
    assert log.segments[0].base_offset == second
    assert log.log_start_offset == second + 1  # not moved down to the segment's base
    assert log.delete_old_segments() == 0
    data = log.read(second + 1, 1000, HW, True).records
    assert [r.offset for r in decode_all(bytes(data))][:2] == [second, second + 1]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(second, 1000, HW, True)
    await log.close()


async def test_retention_disabled_without_delete_policy(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(
        tmp_path, scheduler, retention_ms=1, retention_bytes=1, cleanup_policy=("compact",)
    )
    fill(log, 20)
    log.update_high_watermark(40)
    assert log.delete_old_segments() == 0
    log.maybe_increment_log_start_offset(log.segments[1].base_offset)
    assert log.delete_old_segments() == 1
    await log.close()


# -- flush -------------------------------------------------------------------------------


async def test_flush_moves_the_recovery_point(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler, segment_bytes=1 << 20)
    fill(log, 5)
    assert log.recovery_point == 0
    await log.flush(4)
    assert log.recovery_point == 4
    await log.flush()
    assert log.recovery_point == 10
    await log.flush(3)
    assert log.recovery_point == 10
    await log.close()


async def test_flush_messages_is_reported_and_roll_schedules_a_flush(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler, segment_bytes=1 << 20, flush_messages=6)
    fill(log, 2)
    assert not log.needs_flush
    fill(log, 1)
    # The caller (ReplicaManager) fsyncs before acknowledging, as Kafka's append does.
    assert log.needs_flush
    await log.flush()
    assert log.recovery_point == 6 and not log.needs_flush
    fill(log, 1)
    log.roll()
    await settle(scheduler)
    assert log.recovery_point == 8
    await log.close()


# -- model-based property --------------------------------------------------------------

CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD]

append_op = st.tuples(
    st.just("append"),
    st.integers(min_value=1, max_value=6),  # records
    st.integers(min_value=0, max_value=500),  # timestamp base
    st.sampled_from(CODECS),
    st.integers(min_value=1, max_value=60),  # value size
)
operations = st.lists(
    st.one_of(
        append_op,
        append_op,
        append_op,
        st.tuples(st.just("roll")),
        st.tuples(st.just("truncate"), st.floats(min_value=0, max_value=1)),
        st.tuples(st.just("reopen"), st.booleans(), st.integers(min_value=0, max_value=150)),
        st.tuples(st.just("retain"), st.floats(min_value=0, max_value=1)),
    ),
    max_size=25,
)


class Model:
    """What the log must hold: whole batches of (offset, timestamp, value)."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, int, bytes]]] = []
        self.start = 0
        self.end = 0

    def append(self, stamps: list[int], values: list[bytes]) -> None:
        batch = [(self.end + i, t, v) for i, (t, v) in enumerate(zip(stamps, values, strict=True))]
        self.batches.append(batch)
        self.end += len(batch)

    def truncate(self, offset: int) -> None:
        """UnifiedLog.truncate_to: whole batches go, from the one holding `offset`; at or below
        the log start, everything goes and the log restarts at `offset`."""
        if offset <= self.start:
            self.batches, self.start, self.end = [], offset, offset
            return
        while self.batches and self.batches[-1][-1][0] >= offset:
            self.end = self.batches.pop()[0][0]
        self.start = min(self.start, self.end)

    def lose_from(self, offset: int) -> None:
        """Recovery cut the log back to `offset`, a batch boundary."""
        while self.batches and self.batches[-1][0][0] >= offset:
            self.batches.pop()
        self.end = offset
        self.start = min(self.start, offset)

    @property
    def records(self) -> list[tuple[int, int, bytes]]:
        return [r for batch in self.batches for r in batch]


async def run_scenario(directory: str, ops: list[tuple[object, ...]]) -> None:
    scheduler = Scheduler(asyncio.get_running_loop(), 2)
    config = small_config(segment_bytes=800, index_interval_bytes=120)
    log = open_log(directory, config, scheduler)
    model = Model()
    try:
        for op in ops:
            log = await apply(log, model, op, directory, config, scheduler)
            check_against_model(log, model)
            await check_timestamps(log, model)
        await log.close()
    finally:
        await scheduler.drain()
        scheduler.shutdown()


async def apply(
    log: UnifiedLog,
    model: Model,
    op: tuple[object, ...],
    directory: str,
    config: LogConfig,
    scheduler: Scheduler,
) -> UnifiedLog:
    kind = op[0]
    if kind == "append":
        _, count, ts, codec, size = op
        assert isinstance(count, int) and isinstance(ts, int) and isinstance(size, int)
        stamps = [BASE_TS + ts + (i * 7) % 5 for i in range(count)]
        values = [bytes([48 + (model.end + i) % 10]) * size for i in range(count)]
        info = produce(log, values, stamps, compression=codec)  # type: ignore[arg-type]
        assert info.first_offset == model.end
        model.append(stamps, values)
        log.update_high_watermark(log.log_end_offset)
    elif kind == "roll":
        log.roll()
    elif kind == "truncate":
        fraction = op[1]
        assert isinstance(fraction, float)
        target = int(fraction * (model.end + 1))
        log.truncate_to(target)
        if target < model.end:
            model.truncate(target)
    elif kind == "retain":
        fraction = op[1]
        assert isinstance(fraction, float)
        target = model.start + int(fraction * (model.end - model.start))
        log.maybe_increment_log_start_offset(target)
        log.delete_old_segments()
        model.start = max(model.start, target)
    else:
        _, clean, torn = op
        assert isinstance(torn, int)
        if clean:
            await log.close()
        else:
            # A crash: the process dies with a torn write at the end of the active
            # segment. (The epoch checkpoint write in flight is let finish: a dead
            # process would not write a stale one later.)
            await log.flush_epoch_checkpoint()
            crash_with_torn_tail(log, model, torn)
        # the old log's file removals (file.delete.delay.ms = 0) finish first
        await asyncio.sleep(0)
        await scheduler.drain()
        log = open_log(
            directory,
            config,
            scheduler,
            recovery_point=log.recovery_point,
            log_start_offset=log.log_start_offset,
            clean_shutdown=bool(clean),
        )
        log.update_high_watermark(log.log_end_offset)
    return log


def crash_with_torn_tail(log: UnifiedLog, model: Model, torn: int) -> None:
    active = log.active_segment
    lost = [
        b.header.base_offset
        for b in active.batches_from(0)
        if b.position + b.size > active.size - torn
    ]
    for segment in log.segments:
        segment.close()
    os.truncate(active.log_path, max(active.size - torn, 0))
    if lost:
        model.lose_from(lost[0])


def check_against_model(log: UnifiedLog, model: Model) -> None:
    assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
    assert log.recovery_point <= log.log_end_offset
    assert log.log_end_offset == model.end
    assert log.log_start_offset == model.start
    stored = [(r.offset, r.timestamp, r.value) for r in log_records(log)]
    expected = model.records
    first_kept = log.segments[0].base_offset
    assert [r for r in expected if r[0] >= first_kept] == stored
    assert first_kept <= model.start
    for segment in log.segments:
        positions = brute_force_positions(segment)
        for i in range(segment.offset_index.entries):
            entry = segment.offset_index.entry(i)
            assert positions[entry.offset] == entry.position
        assert segment.size <= 800
    if model.start < model.end:
        data = log.read(model.start, 1 << 20, HW, False)
        assert decode_all(bytes(data.records))[0].offset <= model.start


async def check_timestamps(log: UnifiedLog, model: Model) -> None:
    visible = [r for r in model.records if r[0] >= model.start]
    for target in (BASE_TS, BASE_TS + 250, BASE_TS + 503):
        found = await log.fetch_offset_by_timestamp(target)
        expected = next(((t, o) for o, t, _ in visible if t >= target), None)
        assert (found and (found.timestamp, found.offset)) == expected


@given(operations)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_log_matches_a_model(ops: list[tuple[object, ...]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(run_scenario(partition_dir(root), ops))
