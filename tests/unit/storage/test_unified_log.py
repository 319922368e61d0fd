"""UnifiedLog over LocalLog: the two start offsets (log start, local log start), how
retention, DeleteRecords, truncation and a reload from the checkpoints move them, and the
retention seam a remote tier (KIP-405) plugs into."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from log_support import BASE_TS, log_records, open_log, partition_dir, produce, small_config

from tiercel.protocol.errors import OffsetOutOfRangeError
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.log_values import FetchIsolation
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog

CONFIG = small_config()


def fill(log: UnifiedLog, batches: int) -> None:
    for _ in range(batches):
        start = log.log_end_offset
        produce(log, [b"%05d" % o * 6 for o in (start, start + 1)], [BASE_TS, BASE_TS])


def make_log(tmp_path: Path, scheduler: Scheduler, **overrides: object) -> UnifiedLog:
    return open_log(partition_dir(tmp_path), small_config(**overrides), scheduler)


def bases(log: UnifiedLog) -> list[int]:
    return [segment.base_offset for segment in log.segments]


async def settle(scheduler: Scheduler) -> None:
    await asyncio.sleep(0.01)
    await scheduler.drain()


async def test_start_offsets_are_equal_and_follow_retention(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler, retention_bytes=2048)
    fill(log, 40)
    log.update_high_watermark(log.log_end_offset)
    assert log.log_start_offset == log.local_log_start_offset == 0
    assert log.delete_old_segments() > 0
    first = bases(log)[0]
    assert first > 0
    assert log.log_start_offset == log.local_log_start_offset == first
    assert log.local_log.first_segment_base_offset == first
    await settle(scheduler)


async def test_delete_records_moves_both_start_offsets_inside_a_segment(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler)
    fill(log, 30)
    log.update_high_watermark(log.log_end_offset)
    second = bases(log)[1]
    target = second + 3  # inside the second segment
    assert log.maybe_increment_log_start_offset(target)
    assert log.log_start_offset == log.local_log_start_offset == target
    assert not log.maybe_increment_log_start_offset(target - 1)  # never backwards
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(log.high_watermark + 1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 1000, FetchIsolation.LOG_END, True)
    # Retention removes the segments wholly below it; the start stays inside the segment.
    assert log.delete_old_segments() == 1
    assert bases(log)[0] == second
    assert log.log_start_offset == log.local_log_start_offset == target
    await settle(scheduler)


async def test_truncation_moves_both_start_offsets(tmp_path: Path, scheduler: Scheduler) -> None:
    log = make_log(tmp_path, scheduler)
    fill(log, 30)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(21)  # inside the batch [20, 21]
    log.truncate_to(22)
    assert (log.log_start_offset, log.local_log_start_offset) == (21, 21)
    log.truncate_to(21)  # at the start: the log restarts there, empty
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (21, 21, 21)
    assert bases(log) == [21]
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.local_log_start_offset, log.recovery_point) == (100, 100, 100)
    await settle(scheduler)


async def test_reload_takes_the_checkpointed_start_clamped_to_the_first_segment(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = make_log(tmp_path, scheduler)
    fill(log, 30)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(bases(log)[1] + 1)
    log.delete_old_segments()
    start, first = log.log_start_offset, bases(log)[0]
    await log.close()
    # log-start-offset-checkpoint holds the log start offset: reloaded as it was ...
    again = open_log(log.dir, CONFIG, scheduler, log_start_offset=start)
    assert (again.log_start_offset, again.local_log_start_offset) == (start, start)
    await again.close()
    # ... and one below the first local segment (an older checkpoint) is clamped to it.
    again = open_log(log.dir, CONFIG, scheduler, log_start_offset=0)
    assert (again.log_start_offset, again.local_log_start_offset) == (first, first)
    await again.close()


async def test_retention_asks_before_deleting_local_segments(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = make_log(tmp_path, scheduler, retention_ms=1000)
    fill(log, 30)
    log.update_high_watermark(log.log_end_offset)
    before = bases(log)
    asked: list[tuple[int, int]] = []

    def eligible(segment: LogSegment, next_base: int) -> bool:
        asked.append((segment.base_offset, next_base))
        return segment.base_offset < before[2]  # say: only the first two were tiered

    monkeypatch.setattr(log, "_is_segment_eligible_for_deletion", eligible)
    assert log.delete_old_segments() == 2
    assert asked == [(before[0], before[1]), (before[1], before[2]), (before[2], before[3])]
    assert bases(log) == before[2:]
    assert log.log_start_offset == log.local_log_start_offset == before[2]
    await settle(scheduler)


async def test_follower_append_far_past_the_log_end_rolls_at_its_first_offset(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """A compacted leader's next batch may start more than 2^31 offsets past this
    follower's log end: the new segment starts at the batch (Kafka's maybeRoll with the
    append's first offset), not at the log end, whose 32-bit relative offsets could not
    index it."""
    log = make_log(tmp_path, scheduler, segment_bytes=1 << 20)
    log.append_as_follower(build_record_batch([SimpleRecord(b"k", b"a", timestamp=BASE_TS)] * 3))
    far = log.log_end_offset + 2**31 + 5
    records = [SimpleRecord(b"k", b"b", timestamp=BASE_TS)] * 2
    info = log.append_as_follower(build_record_batch(records, base_offset=far))
    assert info is not None and (info.first_offset, info.last_offset) == (far, far + 1)
    assert bases(log) == [0, far]
    assert log.log_end_offset == far + 2
    assert [r.offset for r in log_records(log)] == [0, 1, 2, far, far + 1]
    await log.close()
    again = open_log(log.dir, CONFIG, scheduler, clean_shutdown=False)
    assert [r.offset for r in log_records(again)] == [0, 1, 2, far, far + 1]
    assert sorted(n for n in os.listdir(log.dir) if n.endswith(".log")) == [
        f"{0:020d}.log",
        f"{far:020d}.log",
    ]
    await again.close()


async def test_one_follower_append_spanning_more_than_a_segment_can_index(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """Two batches 2^31 + 10 offsets apart in one fetch go to two segments."""
    log = make_log(tmp_path, scheduler, segment_bytes=1 << 20)
    far = 2**31 + 10
    data = build_record_batch([SimpleRecord(b"k", b"a", timestamp=BASE_TS)]) + build_record_batch(
        [SimpleRecord(b"k", b"b", timestamp=BASE_TS)], base_offset=far
    )
    log.append_as_follower(data)
    assert bases(log) == [0, far]
    assert [r.offset for r in log_records(log)] == [0, far]
    await log.close()
