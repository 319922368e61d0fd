"""When a log starts a new active segment, and what rolling it does (Kafka's
UnifiedLog.maybeRoll and roll, with LogSegment.shouldRoll).

An append rolls first when the active segment cannot take it: full (segment.bytes),
old (segment.ms less a per-segment jitter, segment.jitter.ms, so that many partitions
created together do not all roll in one instant), its indexes full, or offsets beyond
what 32-bit relative offsets reach (`LogSegment.should_roll`). Retention also rolls an
active segment it must delete or tier. Rolling snapshots the producer state at the new
segment's base offset and flushes the old segment in the background.

Event-loop only: the caller owns the log.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from tiercel.config.log_config import LogConfig
from tiercel.config.logging_setup import log_event
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.topic_partition import TopicPartition

if TYPE_CHECKING:
    from tiercel.storage.unified_log import UnifiedLog

__all__ = ["maybe_roll", "roll", "roll_jitter_ms"]

_log: Final = logging.getLogger("tiercel.log")


def roll_jitter_ms(config: LogConfig, topic_partition: TopicPartition, base_offset: int) -> int:
    """A stable per-segment jitter so that many partitions do not roll in one instant."""
    jitter = config.segment_jitter_ms
    return hash((str(topic_partition), base_offset)) % jitter if jitter > 0 else 0


def maybe_roll(
    log: UnifiedLog,
    messages_size: int,
    max_timestamp: int,
    first_offset: int,
    max_offset: int,
    now_ms: int,
) -> None:
    """Roll when the active segment cannot take the append. The new segment starts at
    the append's first offset, not the log end: a compacted leader's offsets may jump
    past what 32-bit relative offsets reach (Kafka's maybeRoll)."""
    segment = log.active_segment
    config = log.config
    roll_ms = config.max_segment_ms - roll_jitter_ms(
        config, log.topic_partition, segment.base_offset
    )
    if segment.should_roll(
        messages_size, max_timestamp, max_offset, config.segment_bytes, roll_ms, now_ms
    ):
        roll(log, first_offset)


def roll(log: UnifiedLog, expected_next_offset: int) -> LogSegment:
    """See `UnifiedLog.roll`."""
    active = log.active_segment
    segment = log.local_log.roll(expected_next_offset)
    if segment is active:
        return active
    new_base = segment.base_offset
    # A snapshot at every segment base: loading replays at most the segments after the
    # latest one, and retention deletes a segment's snapshot with it.
    log.producer_state.update_map_end_offset(new_base)
    log.producer_state.take_snapshot()
    log_event(
        _log,
        logging.INFO,
        "segment_rolled",
        partition=str(log.topic_partition),
        base_offset=new_base,
    )
    log.schedule_flush(new_base)
    return segment
