"""Truncating a partition's log (Kafka's UnifiedLog.truncateTo and
truncateFullyAndStartAt): what a follower does when its log diverged from its leader's,
or when it starts over at the leader's start offset.

Beyond cutting the segments (`LocalLog.truncate_to`), a truncation has to bring every
offset the log keeps back under the new log end offset: the log start and local log
start offsets, the recovery point, the high watermark; the leader-epoch cache loses the
epochs starting at or above it (and its checkpoint is rewritten); the producer state
loses the snapshots of removed segments and is rebuilt from what is left, as Kafka's
rebuildProducerState after a truncation, before the high watermark is set (the HW
update retires the replayed transactions it has passed, so the LSO never falls back).
The `UnifiedLog.truncation_listener` is then told (the LogManager checkpoints the
lowered recovery point).

A tiered log (KIP-405) truncated exactly at its local start keeps its log start offset
and the epochs below it: the records under the local start are remote, not gone.

Event-loop only, as the log: no step here waits, so no reader sees a half-truncated log.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from tiercel.config.logging_setup import log_event
from tiercel.storage.producer_state_loader import rebuild_producer_state

if TYPE_CHECKING:
    from tiercel.storage.unified_log import UnifiedLog

__all__ = ["truncate_fully_and_start_at", "truncate_to"]

_log: Final = logging.getLogger("tiercel.log")


def truncate_to(log: UnifiedLog, offset: int, now_ms: int) -> bool:
    """Remove everything at and above ``offset``; True if anything was removed.

    The log end offset becomes ``offset`` itself, also when the records just below it
    were compacted away; only when a batch straddles ``offset`` (Kafka never truncates
    there: epoch and end offsets are batch boundaries) does the log end where that batch
    began (`LocalLog.truncate_to`). At or beyond the log end nothing is removed but the
    epoch cache still loses entries starting there: a leader's epoch that never got a
    record (Kafka)."""
    cache = log.leader_epoch_cache
    if offset >= log.log_end_offset:
        entries = cache.entries
        cache.truncate_from_end(log.log_end_offset)
        if cache.entries != entries:
            log.request_epoch_checkpoint()
        return False
    at_tiered_start = (
        log.remote_log_enabled
        and offset == log.local_log_start_offset == log.local_log.first_segment_base_offset
    )
    if offset <= log.local_log_start_offset and not at_tiered_start:
        # At or below the start the log restarts there. A tiered log truncated at its
        # local start instead keeps its log start offset and the epochs below, its first
        # segment emptied as Kafka's truncateTo does at a segment's base: the records
        # under the local start are remote, not gone.
        truncate_fully_and_start_at(log, offset, None, now_ms)
        return True
    truncation = log.local_log.truncate_to(offset)
    # Cutting inside the batch that holds the log start offset ends the log below it;
    # the start follows the end down (Kafka's min(target, log start)).
    log.log_start_offset = min(log.log_start_offset, log.log_end_offset)
    log.reset_local_log_start_offset(min(log.local_log_start_offset, log.log_end_offset))
    cache.truncate_from_end(log.log_end_offset)
    log.request_epoch_checkpoint()
    log.recovery_point = min(log.recovery_point, log.log_end_offset)
    for segment in truncation.deleted_segments:
        log.producer_state.delete_snapshot(segment.base_offset)
    # On the loop, as Kafka does under its log lock: one small snapshot read and a
    # header scan of at most the segment that was cut.
    rebuild_producer_state(
        log.producer_state,
        log.segments,
        log.log_start_offset,
        log.log_end_offset,
        False,
        now_ms,
    )
    # After the rebuild, as Kafka's truncateTo: the replay brings back transactions
    # whose markers the HW passed long ago as not yet replicated, and the HW update is
    # what lets them go; before it, the LSO would fall back to the oldest of them.
    log.update_high_watermark(min(log.high_watermark, log.log_end_offset))
    log_event(
        _log,
        logging.INFO,
        "log_truncated",
        partition=str(log.topic_partition),
        offset=offset,
        bytes_removed=truncation.bytes_removed,
        segments_removed=len(truncation.deleted_segments),
    )
    log.truncation_listener(log)
    return True


def truncate_fully_and_start_at(
    log: UnifiedLog, offset: int, log_start_offset: int | None, now_ms: int
) -> None:
    """Drop every segment and restart the log, empty, at ``offset``, its log start
    offset at ``log_start_offset`` (None: ``offset``): a follower starting at its
    leader's local start keeps the remote part below it."""
    log.local_log.truncate_fully_and_start_at(offset)
    log.log_start_offset = offset if log_start_offset is None else log_start_offset
    log.reset_local_log_start_offset(offset)
    log.recovery_point = offset
    log.leader_epoch_cache.clear()
    log.request_epoch_checkpoint()
    log.producer_state.truncate_fully_and_start_at(offset)
    rebuild_producer_state(log.producer_state, log.segments, offset, offset, False, now_ms)
    log.update_high_watermark(offset)
    log.truncation_listener(log)
