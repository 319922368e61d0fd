"""Which compacted log the cleaner takes next and how far it may clean it (Kafka's
LogCleanerManager and LogToClean), and how a round groups its segments.

A log's first dirty offset is its ``cleaner-offset-checkpoint`` entry (the log start
offset when there is none, or when the entry lies outside the log, which also rewrites
the entry). It may be cleaned up to, not including, the first uncleanable offset: the
lowest of the last stable offset (never past the high watermark: undecided
transactional data is not cleaned), the active segment's base offset, and the base
offset of the first dirty segment whose largest timestamp is younger than
``min.compaction.lag.ms``. Only whole segments are cleaned, so the round stops at the
base offset of the segment holding that offset.

The filthiest log is the one with the largest cleanable ratio, dirty bytes over all
bytes up to that segment; it qualifies when the ratio is above
``min.cleanable.dirty.ratio``, or when it has dirty bytes and its oldest dirty segment
began more than ``max.compaction.lag.ms`` ago.

Event-loop only: these functions read the logs' segment lists and sizes.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.unified_log import UnifiedLog

__all__ = [
    "LogToClean",
    "OffsetsToClean",
    "cleanable_offsets",
    "grab_filthiest_compacted_log",
    "group_segments_by_size",
    "max_compaction_delay",
    "segments_between",
]

_INT32_MAX: Final = 2**31 - 1
_log: Final = logging.getLogger("tiercel.log_cleaner")


def segments_between(log: UnifiedLog, start: int, end: int) -> list[LogSegment]:
    """The segments holding offsets in ``[start, end)``: from the one whose range
    contains ``start`` to the last one whose base offset is below ``end`` (Kafka's
    ``logSegments(from, to)``)."""
    segments = log.segments
    bases = [segment.base_offset for segment in segments]
    first = max(bisect.bisect_right(bases, start) - 1, 0)
    last = bisect.bisect_left(bases, end)
    return list(segments[first:last])


def _non_active_segments_from(log: UnifiedLog, start: int) -> list[LogSegment]:
    return segments_between(log, start, log.active_segment.base_offset)


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    """The dirty range of a log; ``force_update_checkpoint`` when the stored first dirty
    offset was invalid and has been replaced."""

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool


def cleanable_offsets(
    log: UnifiedLog, last_clean_offset: int | None, now_ms: int
) -> OffsetsToClean:
    """From the checkpointed first dirty offset (reset to the log start when missing or
    outside the log) to the first uncleanable offset (see the module docstring)."""
    log_start = log.log_start_offset
    checkpointed = log_start if last_clean_offset is None else last_clean_offset
    if checkpointed < log_start or checkpointed > log.log_end_offset:
        # Retention moving the start past the checkpoint is normal for compact,delete.
        if checkpointed > log.log_end_offset or not log.config.delete:
            log_event(
                _log,
                logging.WARNING,
                "cleaner_checkpoint_reset",
                partition=str(log.topic_partition),
                checkpoint=checkpointed,
                log_start_offset=log_start,
                log_end_offset=log.log_end_offset,
            )
        first_dirty, force = log_start, True
    else:
        first_dirty, force = checkpointed, False
    # Never past the last stable offset: undecided transactional data is not cleaned.
    uncleanable = min(log.last_stable_offset, log.active_segment.base_offset)
    min_lag = max(log.config.min_compaction_lag_ms, 0)
    if min_lag > 0:
        for segment in _non_active_segments_from(log, first_dirty):
            if segment.largest_timestamp() > now_ms - min_lag:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, uncleanable), force)


def max_compaction_delay(log: UnifiedLog, first_dirty_offset: int, now_ms: int) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty segment is (0: not)."""
    first_timestamps = [
        segment.rolling_based_timestamp
        for segment in _non_active_segments_from(log, first_dirty_offset)
        if segment.rolling_based_timestamp is not None and segment.rolling_based_timestamp > 0
    ]
    earliest = min(first_timestamps, default=None)
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest is not None and earliest < clean_until else 0


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A log with its dirty range and sizes. ``first_uncleanable_offset`` is the base
    offset of the segment holding the first uncleanable offset: the round's end."""

    log: UnifiedLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False

    @classmethod
    def of(
        cls, log: UnifiedLog, first_dirty: int, uncleanable: int, need_compaction_now: bool = False
    ) -> LogToClean:
        clean_bytes = sum(s.size for s in segments_between(log, -1, first_dirty))
        non_active = _non_active_segments_from(log, uncleanable)
        first_uncleanable = (non_active[0] if non_active else log.active_segment).base_offset
        cleanable_bytes = sum(
            s.size
            for s in segments_between(log, min(first_dirty, first_uncleanable), first_uncleanable)
        )
        return cls(
            log, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, need_compaction_now
        )

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def grab_filthiest_compacted_log(
    logs: Iterable[UnifiedLog],
    checkpoints: Mapping[TopicPartition, int],
    excluded: Container[TopicPartition],
    now_ms: int,
) -> tuple[LogToClean | None, dict[TopicPartition, int]]:
    """The compacted log to clean next, if any qualifies, and the checkpoint entries to
    rewrite because they were invalid."""
    resets: dict[TopicPartition, int] = {}
    dirty: list[LogToClean] = []
    for log in logs:
        tp = log.topic_partition
        if not log.config.compact or log.deleted or tp in excluded:
            continue
        offsets = cleanable_offsets(log, checkpoints.get(tp), now_ms)
        if offsets.force_update_checkpoint:
            resets[tp] = offsets.first_dirty_offset
        delay = max_compaction_delay(log, offsets.first_dirty_offset, now_ms)
        candidate = LogToClean.of(
            log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset, delay > 0
        )
        if candidate.total_bytes > 0:
            dirty.append(candidate)
    cleanable = [
        c
        for c in dirty
        if (c.need_compaction_now and c.cleanable_bytes > 0)
        or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio
    ]
    return max(cleanable, key=lambda c: c.cleanable_ratio, default=None), resets


def group_segments_by_size(
    segments: Sequence[LogSegment],
    max_size: int,
    max_index_size: int,
    first_uncleanable_offset: int,
) -> list[list[LogSegment]]:
    """Consecutive runs of ``segments`` each cleaned into one segment: together at most
    ``max_size`` bytes of log and ``max_index_size`` bytes of each index, and offsets
    within 2**31 - 1 of the run's base (the next segment's base, or the first uncleanable
    offset, bounds a segment's last offset)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].offset_index.size_in_bytes
        time_index_size = segments[i].time_index.size_in_bytes
        i += 1
        while i < len(segments):
            candidate = segments[i]
            bound = (
                segments[i + 1].base_offset - 1
                if i + 1 < len(segments)
                else first_uncleanable_offset - 1
            )
            if not (
                log_size + candidate.size <= max_size
                and index_size + candidate.offset_index.size_in_bytes <= max_index_size
                and time_index_size + candidate.time_index.size_in_bytes <= max_index_size
                and (candidate.size == 0 or bound - group[0].base_offset <= _INT32_MAX)
            ):
                break
            group.append(candidate)
            log_size += candidate.size
            index_size += candidate.offset_index.size_in_bytes
            time_index_size += candidate.time_index.size_in_bytes
            i += 1
        groups.append(group)
    return groups
