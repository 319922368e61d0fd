"""A leader's copy of its rolled segments to the remote tier (Kafka's
RemoteLogManager.RLMCopyTask, KIP-405).

Each round: on the first, find where this leader continues (`find_highest_remote_offset`)
and tell the log; then copy the `candidate_log_segments` in offset order, one at a time
(one copy in flight per partition), each charged to the broker's copy quota first. A copy
is recorded COPY_SEGMENT_STARTED with the metadata manager, uploaded from the segment's
files by the storage manager in the copier pool, then recorded COPY_SEGMENT_FINISHED,
after which the log's highest remote offset moves to the segment's end and local
retention may delete it.

Segment files stay put during an upload: local retention deletes only segments at or
below the highest remote offset, which this copy has not moved yet. A truncation (this
broker lost leadership and became a follower), a deletion of the log, or the task's
cancellation meanwhile abandons the copy: the segment stays COPY_SEGMENT_STARTED, and
this broker's expiration task deletes it as its own dangling upload, as any failed copy
(another leader leaves it to retention, as Kafka does: see `RLMExpirationTask`). An
abandoned or cancelled upload, or one whose COPY_SEGMENT_FINISHED is refused because a
leader is deleting it (retention or the log start offset took it meanwhile), also
deletes its own objects: that deletion may have run before the upload's last objects
were written.
The bytes of rolled segments below the last stable offset not yet copied are the
partition's backlog, logged when it grows while copies fail.

Event-loop only, but for the upload itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.storage.file_names import TXN_INDEX_FILE_SUFFIX, producer_snapshot_file
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.leader_epoch_lineage import epoch_entries_as_bytes
from tiercel.tiered.remote_log_segment_candidates import (
    EnrichedLogSegment,
    candidate_log_segments,
    find_highest_remote_offset,
    find_log_start_offset,
)
from tiercel.tiered.rlm_task import RLMContext, RLMTask, run_blocking
from tiercel.tiered.rsm.remote_storage_manager import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
)

__all__ = ["RLMCopyTask"]

_log: Final = logging.getLogger("tiercel.remote_log_manager")


class RLMCopyTask(RLMTask):
    """Invariant: ``copied_offset`` (once known) is the highest offset this leader has
    copied on its lineage, and the log's highest remote offset is at least it."""

    failure_event = "remote_copy_failed"

    def __init__(
        self, context: RLMContext, partition: TopicIdPartition, log: UnifiedLog, leader_epoch: int
    ) -> None:
        super().__init__(context, partition, log)
        self.leader_epoch = leader_epoch
        self.copied_offset: int | None = None
        self.backlog_bytes = 0
        self._logged_backlog = 0

    async def run_once(self) -> None:
        log = self.log
        if not log.remote_log_enabled or log.config.remote_log_copy_disable:
            return
        if self.copied_offset is None:
            self._update_log_start_offset_on_becoming_leader()
            self.copied_offset = find_highest_remote_offset(self.context.rlmm, self.partition, log)
            log.update_highest_offset_in_remote_storage(self.copied_offset)
            log_event(
                _log,
                logging.INFO,
                "remote_copy_resumed",
                partition=str(log.topic_partition),
                leader_epoch=self.leader_epoch,
                copied_offset=self.copied_offset,
            )
        candidates = self._candidates()
        self.backlog_bytes = sum(c.segment.size for c in candidates)
        truncations = log.truncations
        for i, candidate in enumerate(candidates):
            await self.context.copy_quota.acquire(candidate.segment.size)
            if self.is_cancelled() or log.deleted or log.truncations != truncations:
                return  # the candidates are stale
            if not self._snapshot_ready(candidate.next_segment_offset):
                return  # the next round copies it
            if not await self._copy_log_segment(candidate):
                return
            self.backlog_bytes = sum(c.segment.size for c in candidates[i + 1 :])

    def _candidates(self) -> list[EnrichedLogSegment]:
        """The segments to copy now, from the first offset not yet copied."""
        log = self.log
        copied = (
            log.highest_offset_in_remote_storage
            if self.copied_offset is None
            else self.copied_offset
        )
        # A log start offset above the copied offset (DeleteRecords, tiering just
        # enabled) skips what no reader can get any more (Kafka).
        from_offset = max(copied + 1, log.log_start_offset)
        # Below the last stable offset, not the high watermark (Kafka's
        # candidateLogSegments): an undecided transaction's records stay local.
        return candidate_log_segments(log, from_offset, log.last_stable_offset)

    def _update_log_start_offset_on_becoming_leader(self) -> None:
        """Kafka's maybeUpdateLogStartOffsetOnBecomingLeader: the remote tier may start
        above this log's start (the old leader's retention deleted segments). A start
        past this leader's high watermark is refused (OffsetOutOfRangeError, Kafka's
        maybeIncrementLogStartOffset): the round copies nothing and the next one tries
        again, rather than leave the log start below the remote tier's first offset."""
        log = self.log
        start = find_log_start_offset(self.context.rlmm, self.partition, log)
        if log.maybe_increment_log_start_offset(start):
            log_event(
                _log,
                logging.INFO,
                "log_start_offset_incremented",
                partition=str(log.topic_partition),
                log_start_offset=log.log_start_offset,
                reason="remote log start on becoming leader",
            )

    async def run_guarded(self) -> bool:
        ok = await super().run_guarded()
        if not ok:
            # As of now, not of the round's start: a round that waited for an
            # unreachable store until its timeout saw none of the segments rolled since.
            self.backlog_bytes = sum(c.segment.size for c in self._candidates())
        if not ok and self.backlog_bytes > self._logged_backlog:
            log_event(
                _log,
                logging.WARNING,
                "remote_copy_backlog",
                partition=str(self.log.topic_partition),
                backlog_bytes=self.backlog_bytes,
            )
            self._logged_backlog = self.backlog_bytes
        elif ok:
            self._logged_backlog = 0
        return ok

    def _snapshot_ready(self, offset: int) -> bool:
        """The producer snapshot taken at the roll is written (a segment is never
        uploaded without the producer state a follower rebuilds from it)."""
        state = self.log.producer_state
        return offset not in state.snapshot_offsets or state.snapshot_written(offset)

    async def _copy_log_segment(self, candidate: EnrichedLogSegment) -> bool:
        """Copy one segment; False if the copy was abandoned."""
        context, log, segment = self.context, self.log, candidate.segment
        next_offset = candidate.next_segment_offset
        truncations = log.truncations
        cache = log.leader_epoch_cache
        epochs = cache.epoch_entries_in_range(segment.base_offset, next_offset)
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate(self.partition.topic_id, log.topic_partition),
            segment.base_offset,
            candidate.end_offset,
            segment.largest_timestamp(),
            context.broker_id,
            context.clock_ms(),
            segment.size,
            {entry.epoch: entry.start_offset for entry in epochs},
            # Rolled: no marker is appended to it any more (Kafka's copyLogSegment).
            txn_idx_empty=segment.txn_index.is_empty,
        )
        snapshot = (
            producer_snapshot_file(log.dir, next_offset)
            if next_offset in log.producer_state.snapshot_offsets
            else None
        )
        # Kafka stores the whole lineage up to the segment's end: a follower rebuilding
        # its epoch cache from this segment needs the epochs before it too.
        epochs_index = epoch_entries_as_bytes(cache.epoch_entries_in_range(-1, next_offset))
        segment_id = metadata.remote_log_segment_id
        # Before the metadata is visible, and until both the upload has returned and
        # COPY_SEGMENT_FINISHED is applied (a write that may be retried for a while, the
        # metadata partition's leader being gone) or the copy is given up: the
        # expiration task must never take this copy for an orphan (Kafka's
        # segmentIdsBeingCopied).
        being_copied = _BeingCopied(context.segment_ids_being_copied, segment_id)
        try:
            await context.rlmm.add_remote_log_segment_metadata(metadata)
        except BaseException:
            being_copied.release()
            being_copied.release()
            raise
        # Set when this task is cancelled during the upload (the broker stops, say):
        # the thread, which finishes the upload regardless, then deletes it again.
        abandoned = threading.Event()
        returned = asyncio.Event()

        def upload_returned() -> None:
            being_copied.release()
            returned.set()

        try:
            try:
                await run_blocking(
                    context.copier_pool,
                    _copy,
                    context.rsm,
                    metadata,
                    segment.log_path,
                    segment.offset_index.path,
                    segment.time_index.path,
                    snapshot,
                    epochs_index,
                    abandoned,
                    # Once the upload has returned, also when this task was cancelled.
                    on_done=upload_returned,
                )
            except asyncio.CancelledError:
                abandoned.set()
                context.upload_abandoned(metadata, returned)
                raise
            if self.is_cancelled() or log.deleted or log.truncations != truncations:
                log_event(
                    _log,
                    logging.WARNING,
                    "remote_copy_abandoned",
                    partition=str(log.topic_partition),
                    segment_id=str(segment_id.id),
                    base_offset=segment.base_offset,
                )
                if self.is_cancelled():  # leadership moved just as the upload returned
                    context.upload_abandoned(metadata, returned)
                await self._delete_uploaded(metadata)
                return False
            try:
                await context.rlmm.update_remote_log_segment_metadata(
                    RemoteLogSegmentMetadataUpdate(
                        segment_id,
                        context.clock_ms(),
                        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                        context.broker_id,
                    )
                )
            except (ValueError, RemoteResourceNotFoundError):
                # Refused before anything was published: the segment is already being
                # deleted, or deleted, by a new leader of the partition (this broker
                # lost leadership during the upload, and retention or the log start
                # offset took the segment meanwhile).
                await self._delete_uploaded(metadata)
                raise
        finally:
            being_copied.release()
        self.copied_offset = candidate.end_offset
        log.update_highest_offset_in_remote_storage(candidate.end_offset)
        log_event(
            _log,
            logging.INFO,
            "remote_segment_copied",
            partition=str(log.topic_partition),
            base_offset=segment.base_offset,
            end_offset=candidate.end_offset,
            size=metadata.segment_size_in_bytes,
            segment_id=str(segment_id.id),
        )
        return True

    async def _delete_uploaded(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete the objects of an upload that will never be COPY_SEGMENT_FINISHED.
        A leader's expiration task deletes such a COPY_SEGMENT_STARTED segment too, but
        when its deletion ran while this upload was still writing, the objects written
        after it (the manifest among them) would stay in the tier for good. Deletion is
        idempotent; a failure leaves the objects to that deletion, so it is logged."""
        try:
            await run_blocking(
                self.context.copier_pool, self.context.rsm.delete_log_segment_data, metadata
            )
        except RemoteStorageError as e:
            log_event(
                _log,
                logging.WARNING,
                "remote_copy_cleanup_failed",
                partition=str(self.log.topic_partition),
                segment_id=str(metadata.remote_log_segment_id.id),
                error=repr(e),
            )


class _BeingCopied:
    """A segment id in ``segment_ids_being_copied`` while its upload thread runs or its
    copy task has not finished with it, whichever ends last (Kafka removes it from
    segmentIdsBeingCopied only once copyLogSegment, FINISHED metadata included, has
    returned). Event-loop only."""

    def __init__(self, ids: set[RemoteLogSegmentId], segment_id: RemoteLogSegmentId) -> None:
        self._ids = ids
        self._segment_id = segment_id
        self._holders = 2  # the upload and the task
        ids.add(segment_id)

    def release(self) -> None:
        self._holders -= 1
        if self._holders == 0:
            self._ids.discard(self._segment_id)


def _copy(
    rsm: RemoteStorageManager,
    metadata: RemoteLogSegmentMetadata,
    log_path: str,
    offset_index: str,
    time_index: str,
    snapshot: str | None,
    epochs_index: bytes,
    abandoned: threading.Event,
) -> None:
    """*Blocking*, in the copier pool: the upload, from the segment's file paths, and
    its deletion if the copy was ``abandoned`` meanwhile (see `_delete_uploaded`)."""
    txn_index = log_path.removesuffix(".log") + TXN_INDEX_FILE_SUFFIX
    if snapshot is not None and not os.path.exists(snapshot):
        # Gone with a truncation meanwhile: never upload without it.
        raise RemoteStorageError(f"producer snapshot {snapshot} is gone")
    data = LogSegmentData(
        log_path,
        offset_index,
        time_index,
        txn_index if os.path.exists(txn_index) else None,
        snapshot,
        epochs_index,
    )
    rsm.copy_log_segment_data(metadata, data)
    if abandoned.is_set():
        rsm.delete_log_segment_data(metadata)
