"""Which segments retention deletes, and the pass that deletes them (Kafka's
UnifiedLog.deleteOldSegments).

A segment goes when the local log start offset has passed it (DeleteRecords, or the
start offset checkpointed), when its largest timestamp is older than the retention time,
or while the log exceeds the retention size by at least its size — the last two only
with ``cleanup.policy`` containing ``delete``. Segments go oldest first, only whole, only
below the high watermark (a consumer may still need the rest), and the first segment
that must stay ends the pass. An empty segment at the log end offset never goes.

With the remote tier copying (KIP-405, Kafka's remoteLogEnabledAndRemoteCopyEnabled)
the limits are ``local.retention.ms/bytes``, the owning log lets only segments already
copied there go (its isSegmentEligibleForDeletion), and what leaves local disk moves only
the local log start offset: total retention is the RemoteLogManager's. An active segment
that breaches local retention is rolled so that it can be copied, then deleted.

Event-loop only: the caller owns the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from tiercel.config.log_config import LogConfig
from tiercel.config.logging_setup import log_event
from tiercel.storage.log_segment import LogSegment

if TYPE_CHECKING:
    from tiercel.storage.unified_log import UnifiedLog

__all__ = ["SegmentEligibility", "deletable_segments", "delete_old_segments", "retention_limits"]

_log: Final = logging.getLogger("tiercel.log")

# (segment, base offset of the next segment or the log end offset) -> may it go?
SegmentEligibility = Callable[[LogSegment, int], bool]


def retention_limits(config: LogConfig, tiered: bool) -> tuple[int, int]:
    """(retention ms, retention bytes) that apply to local segments (Kafka's
    UnifiedLog.localRetentionMs / localRetentionSize)."""
    if tiered:
        return config.local_retention_ms, config.local_retention_bytes
    return config.retention_ms, config.retention_bytes


def deletable_segments(
    segments: Sequence[LogSegment],
    log_end_offset: int,
    high_watermark: int,
    local_log_start_offset: int,
    config: LogConfig,
    limits: tuple[int, int],
    now_ms: int,
    eligible: SegmentEligibility,
) -> tuple[list[LogSegment], bool]:
    """The oldest segments retention deletes now, and whether the active segment itself
    breaches retention (see the module docstring). Pure."""
    retention_ms, retention_bytes = limits
    deletable: list[LogSegment] = []
    size = sum(segment.size for segment in segments)
    excess = size - retention_bytes if retention_bytes >= 0 else -1
    for i, segment in enumerate(segments):
        last = i + 1 == len(segments)
        next_base = log_end_offset if last else segments[i + 1].base_offset
        if next_base > high_watermark or (segment.size == 0 and next_base == segment.base_offset):
            break
        breached_start = next_base <= local_log_start_offset
        breached_time = (
            config.delete
            and retention_ms >= 0
            and (now_ms - segment.largest_timestamp() > retention_ms)
        )
        breached_size = config.delete and excess - segment.size >= 0
        if not (breached_start or breached_time or breached_size):
            break
        if not eligible(segment, next_base):
            return deletable, last and segment.size > 0
        excess -= segment.size
        deletable.append(segment)
    return deletable, False


def delete_old_segments(log: UnifiedLog, eligible: SegmentEligibility, now_ms: int) -> int:
    """One retention pass over ``log``; returns the number of segments deleted."""
    tiered = log.remote_copy_enabled
    deletable, breached_active = deletable_segments(
        log.segments,
        log.log_end_offset,
        log.high_watermark,
        log.local_log_start_offset,
        log.config,
        retention_limits(log.config, tiered),
        now_ms,
        eligible,
    )
    if breached_active and tiered:
        log.roll()
    if not deletable:
        return 0
    if len(deletable) == len(log.segments):
        log.roll()
    log.local_log.remove_oldest_segments(deletable)
    # What leaves local disk leaves the log unless the remote tier has it (Kafka's
    # incrementStartOffset after deleteSegments).
    new_start = log.local_log.first_segment_base_offset
    if tiered:
        log.maybe_increment_local_log_start_offset(new_start)
    elif new_start > log.log_start_offset:
        log.maybe_increment_log_start_offset(new_start)
    for segment in deletable:
        log.producer_state.delete_snapshot(segment.base_offset)
        log_event(
            _log,
            logging.INFO,
            "segment_deleted",
            partition=str(log.topic_partition),
            base_offset=segment.base_offset,
            size=segment.size,
            reason="local retention" if tiered else "retention",
        )
    return len(deletable)
