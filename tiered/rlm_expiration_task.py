"""A leader's total retention over the remote tier (Kafka's
RemoteLogManager.RLMExpirationTask.cleanupExpiredRemoteLogSegments, KIP-405).

Each round walks the remote segments epoch by epoch along the log's leader-epoch
lineage, oldest first, and deletes:

- segments wholly below the log start offset (DeleteRecords, or a start offset another
  leader moved);
- segments beyond ``retention.ms`` by their largest timestamp, and the oldest segments
  while remote (on the lineage) plus local-only bytes exceed ``retention.bytes``;
- segments not on the lineage (Kafka's isRemoteSegmentWithinLeaderEpochs: left by an
  unclean election or an old leader) and segments of epochs older than the lineage's
  first, but for one that begins with lineage records no segment on the lineage holds
  (the new leader's copy counted them as copied);
- dangling segments: DELETE_SEGMENT_STARTED ones (a deletion to finish, as Kafka retries
  them), and this broker's own COPY_SEGMENT_STARTED uploads that no copy of this
  process is doing (a failed or abandoned copy, or one cut short by a crash before a
  restart: only this broker could finish it, so it never will).

Another broker's COPY_SEGMENT_STARTED upload is never taken for an orphan, as in Kafka:
that broker (the partition's previous leader) may still be finishing it, and deleting it
raced with its late COPY_SEGMENT_FINISHED. Like any segment it is deleted when it is
below the log start offset or beyond retention on the lineage, or when all its epochs
are older than the leader-epoch cache's earliest (Kafka's
deleteLogSegmentsDueToLeaderEpochCacheTruncation); a valid one within retention stops
the pass, as in Kafka.

The pass over the lineage stops at the first segment that is valid and within retention.
Before deleting, the log start offset moves past the segments retention takes, so that
followers learn it from fetch responses and no reader is sent to a segment being
deleted; when that offset is past the high watermark the round deletes nothing. Each
deletion is DELETE_SEGMENT_STARTED, the storage manager's delete in the expiration
pool, then DELETE_SEGMENT_FINISHED.

Event-loop only, but for the deletions themselves.
"""

from __future__ import annotations

import logging
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.tiered.leader_epoch_lineage import (
    filtered_leader_epoch_map,
    is_remote_segment_within_leader_epochs,
    lineage_end_offset,
)
from tiercel.tiered.rlm_task import RLMContext, RLMTask, run_blocking
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

__all__ = ["RLMExpirationTask", "delete_remote_log_segment"]

_log: Final = logging.getLogger("tiercel.remote_log_manager")
_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED


async def delete_remote_log_segment(
    context: RLMContext, metadata: RemoteLogSegmentMetadata
) -> None:
    """Kafka's deleteRemoteLogSegment: through DELETE_SEGMENT_STARTED and _FINISHED."""
    segment_id = metadata.remote_log_segment_id
    if metadata.state != _DELETE_STARTED:
        await context.rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                segment_id, context.clock_ms(), _DELETE_STARTED, context.broker_id
            )
        )
    await run_blocking(context.expiration_pool, context.rsm.delete_log_segment_data, metadata)
    for listener in context.segment_deleted_listeners:
        listener(metadata)
    await context.rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            segment_id,
            context.clock_ms(),
            RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
            context.broker_id,
        )
    )


class _RetentionHandler:
    """Kafka's RemoteLogRetentionHandler: the time and size limits of one round, and
    the log start offset the segments they take leave behind."""

    def __init__(self, cleanup_until_ms: int | None, breached_bytes: int) -> None:
        self.cleanup_until_ms = cleanup_until_ms
        self.remaining_breached_bytes = breached_bytes
        self.log_start_offset: int | None = None

    def is_breached(self, metadata: RemoteLogSegmentMetadata) -> bool:
        by_time = (
            self.cleanup_until_ms is not None and metadata.max_timestamp_ms <= self.cleanup_until_ms
        )
        remaining = self.remaining_breached_bytes
        by_size = remaining > 0 and remaining - metadata.segment_size_in_bytes >= 0
        if not (by_time or by_size):
            return False
        self.remaining_breached_bytes = max(
            0, self.remaining_breached_bytes - metadata.segment_size_in_bytes
        )
        end = metadata.end_offset + 1
        self.log_start_offset = max(end, self.log_start_offset or end)
        return True


class RLMExpirationTask(RLMTask):
    failure_event = "remote_expiration_failed"

    async def run_once(self) -> None:
        if not self.log.remote_log_enabled:
            return
        lineage = filtered_leader_epoch_map(self.log.leader_epoch_cache.entries)
        if not lineage:
            return
        handler = self._retention_handler(lineage)
        doomed = self._dangling()
        self._expired(lineage, handler, doomed)
        self._off_lineage(lineage, doomed)
        if handler.log_start_offset is not None:
            self._advance_log_start_offset(handler.log_start_offset)
        for planned in doomed:
            if self.is_cancelled():
                return
            # Each deletion awaits the metadata topic: re-check the segment against the
            # view now; one that changed state meanwhile (a late COPY_SEGMENT_FINISHED)
            # is planned again by the next round.
            metadata = self._unchanged(planned)
            if metadata is None:
                continue
            await delete_remote_log_segment(self.context, metadata)
            log_event(
                _log,
                logging.INFO,
                "remote_segment_deleted",
                partition=str(self.log.topic_partition),
                start_offset=metadata.start_offset,
                end_offset=metadata.end_offset,
                state=metadata.state.name,
            )

    def _expired(
        self,
        lineage: dict[int, int],
        handler: _RetentionHandler,
        doomed: list[RemoteLogSegmentMetadata],
    ) -> None:
        """Add to ``doomed`` the finished and unfinished (another broker's) segments
        along the lineage, oldest first, below the log start offset or beyond
        retention; stop at the first valid one that stays or at a copy in progress here
        (Kafka's walk in cleanupExpiredRemoteLogSegments)."""
        log_start, log_end = self.log.log_start_offset, self.log.log_end_offset
        first_epoch = min(lineage)
        seen = {m.remote_log_segment_id for m in doomed}
        for epoch in sorted(lineage):
            for metadata in self.context.rlmm.list_remote_log_segments(self.partition, epoch):
                segment_id = metadata.remote_log_segment_id
                if segment_id in self.context.segment_ids_being_copied:
                    return
                if segment_id in seen or metadata.state not in (_FINISHED, _STARTED):
                    continue
                below_start = metadata.end_offset < log_start and all(
                    e <= first_epoch for e in metadata.segment_leader_epochs
                )
                if not below_start and not is_remote_segment_within_leader_epochs(
                    metadata, log_end, lineage
                ):
                    continue  # `_off_lineage` deletes it
                if not (below_start or handler.is_breached(metadata)):
                    return
                seen.add(segment_id)
                doomed.append(metadata)

    def _off_lineage(self, lineage: dict[int, int], doomed: list[RemoteLogSegmentMetadata]) -> None:
        """Add the finished segments not on the lineage: epochs this log never had or
        offsets beyond where its epochs end (an unclean election, an old leader's
        uploads), and epochs older than its first (Kafka's leader-epoch-cache
        truncation), unless the segment still holds lineage records no segment on the
        lineage has (see `_holds_lineage_records`); and the unfinished uploads of other
        brokers whose epochs are all older than the cache's earliest (Kafka deletes
        those in any state)."""
        seen = {m.remote_log_segment_id for m in doomed}
        log_end = self.log.log_end_offset
        listed = [
            m
            for m in self.context.rlmm.list_remote_log_segments(self.partition)
            if m.remote_log_segment_id not in seen
        ]
        finished = [m for m in listed if m.state == _FINISHED]
        earliest = self.log.leader_epoch_cache.entries[0].epoch
        copying = self.context.segment_ids_being_copied
        doomed.extend(
            m
            for m in listed
            if m.state == _STARTED
            and m.remote_log_segment_id not in copying
            and all(e < earliest for e in m.segment_leader_epochs)
        )
        within = [
            m for m in finished if is_remote_segment_within_leader_epochs(m, log_end, lineage)
        ]
        ids = {m.remote_log_segment_id for m in within}
        doomed.extend(
            m
            for m in finished
            if m.remote_log_segment_id not in ids
            and not self._holds_lineage_records(m, lineage, within)
        )

    def _unchanged(self, planned: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        """``planned`` as the view has it now, or None if it changed state, went away or
        is being copied: the next round plans again."""
        segment_id = planned.remote_log_segment_id
        if segment_id in self.context.segment_ids_being_copied:
            return None
        for current in self.context.rlmm.list_remote_log_segments(self.partition):
            if current.remote_log_segment_id == segment_id:
                return current if current.state == planned.state else None
        return None

    def _holds_lineage_records(
        self,
        metadata: RemoteLogSegmentMetadata,
        lineage: dict[int, int],
        within: list[RemoteLogSegmentMetadata],
    ) -> bool:
        """Whether an off-lineage segment begins with records of the lineage, above the
        log start offset, that no segment on the lineage holds. A new leader's copy
        continues after the highest remote offset of its own epochs, capped where its
        epoch ends (`find_highest_remote_offset`, as Kafka's findHighestRemoteOffset), so
        it counts such a prefix as copied and local retention deletes it here; deleting
        the segment would lose those records (KIP-405 scenario 3: seg-0-1 still serves
        offset 0 after the leader's epoch 1 starts at 1)."""
        first = max(metadata.start_offset, self.log.log_start_offset)
        if first > metadata.end_offset:
            return False
        end = lineage_end_offset(metadata, lineage, first)
        covered = first
        for m in sorted(within, key=lambda m: m.start_offset):
            if m.start_offset <= covered <= m.end_offset:
                covered = m.end_offset + 1
        return covered < end

    def _dangling(self) -> list[RemoteLogSegmentMetadata]:
        """Deletions left half done, and this broker's uploads no copy of this process
        is doing. ``segment_ids_being_copied`` holds a copy's segment until its thread
        has returned and its task is done with it (COPY_SEGMENT_FINISHED recorded or the
        copy given up), so such an upload can never be finished any more; an upload of
        another broker may be (see the module docstring)."""
        context = self.context
        return [
            m
            for m in context.rlmm.list_remote_log_segments(self.partition)
            if m.state == _DELETE_STARTED
            or (
                m.state == _STARTED
                and m.broker_id == context.broker_id
                and m.remote_log_segment_id not in context.segment_ids_being_copied
            )
        ]

    def _retention_handler(self, lineage: dict[int, int]) -> _RetentionHandler:
        log = self.log
        config = log.config
        cleanup_until = (
            self.context.clock_ms() - config.retention_ms if config.retention_ms > -1 else None
        )
        breached = 0
        if config.retention_bytes > -1:
            remote = {
                m.remote_log_segment_id: m.segment_size_in_bytes
                for m in self.context.rlmm.list_remote_log_segments(self.partition)
                if m.state == _FINISHED
                and is_remote_segment_within_leader_epochs(m, log.log_end_offset, lineage)
            }
            highest = log.highest_offset_in_remote_storage
            # Kafka's onlyLocalLogSegmentsSize: the local bytes not yet in the remote tier.
            local_only = sum(s.size for s in log.segments if s.base_offset >= highest)
            breached = max(0, sum(remote.values()) + local_only - config.retention_bytes)
        return _RetentionHandler(cleanup_until, breached)

    def _advance_log_start_offset(self, offset: int) -> None:
        """Kafka's updateLogStartOffsetFromRemoteTier. Past the high watermark (a new
        leader's, not caught up yet) ``maybe_increment_log_start_offset`` refuses it
        with OffsetOutOfRangeError, as Kafka's maybeIncrementLogStartOffset does: the
        round fails before deleting anything and is retried. A log start clamped to the
        high watermark instead would stay inside the segments the round deletes."""
        log = self.log
        if log.maybe_increment_log_start_offset(offset):
            log_event(
                _log,
                logging.INFO,
                "log_start_offset_incremented",
                partition=str(log.topic_partition),
                log_start_offset=log.log_start_offset,
                reason="remote retention",
            )
