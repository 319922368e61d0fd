"""Which segments retention deletes (Kafka's UnifiedLog.deleteOldSegments predicates).

A segment goes when the log start offset has passed it (DeleteRecords, or the start
offset checkpointed), when its largest timestamp is older than ``retention.ms``, or while
the log exceeds ``retention.bytes`` by at least its size — the last two only with
``cleanup.policy`` containing ``delete``. Segments go oldest first, only whole, only
below the high watermark (a consumer may still need the rest), and the first segment
that must stay ends the pass. An empty segment at the log end offset never goes. The
owning log asks each candidate's eligibility too: with a remote tier (KIP-405) only
segments already copied there may leave local disk.

Pure: the caller (event-loop only) passes its segments and offsets and deletes the
answer itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tiercel.config.log_config import LogConfig
from tiercel.storage.log_segment import LogSegment

# (segment, base offset of the next segment or the log end offset) -> may it go?
SegmentEligibility = Callable[[LogSegment, int], bool]


def deletable_segments(
    segments: Sequence[LogSegment],
    log_end_offset: int,
    high_watermark: int,
    log_start_offset: int,
    config: LogConfig,
    now_ms: int,
    eligible: SegmentEligibility,
) -> list[LogSegment]:
    """The oldest segments retention deletes now (see the module docstring)."""
    deletable: list[LogSegment] = []
    size = sum(segment.size for segment in segments)
    excess = size - config.retention_bytes if config.retention_bytes >= 0 else -1
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else log_end_offset
        if next_base > high_watermark or (segment.size == 0 and next_base == segment.base_offset):
            break
        breached_start = next_base <= log_start_offset
        breached_time = (
            config.delete
            and config.retention_ms >= 0
            and (now_ms - segment.largest_timestamp() > config.retention_ms)
        )
        breached_size = config.delete and excess - segment.size >= 0
        if not (breached_start or breached_time or breached_size):
            break
        if not eligible(segment, next_base):
            break
        excess -= segment.size
        deletable.append(segment)
    return deletable
