"""UnifiedLog: one partition replica — its offsets, epochs and producers over its segments.

Kafka 3.x's UnifiedLog: the segments themselves (append, roll, read, truncation, file
removal) are the `LocalLog`'s; this class owns what spans tiers and what the replication
protocol needs: ``log_start_offset`` (the first offset a reader can get, remote segments
included), ``local_log_start_offset`` (the first offset on local disk), the highest
offset copied to the remote tier, the high watermark and the recovery point, the
leader-epoch cache, the producer state with the last stable offset (LSO: where the
oldest undecided transaction starts, never past the HW). Helpers beside it, one concern
each, take the log and use its public state: transactions and the LSO
(`storage.log_transactions`), retention (`storage.log_retention`), rolling
(`storage.log_roll`), truncation (`storage.log_truncation`), timestamp lookups
(`storage.timestamp_lookup`). Without a remote tier (`remote_log_enabled` false) the two
start offsets are equal. A partition directory also holds ``leader-epoch-checkpoint``
and ``partition.metadata``.

Contract: event-loop only. Appends and reads are page-cache ``writev``/``pread`` on the
loop; every fsync, rename, deletion and checkpoint write goes through the `Scheduler`.

Invariants:
- log_start_offset <= local_log_start_offset <= high_watermark <= log_end_offset;
- log_start_offset <= last_stable_offset <= high_watermark;
- recovery_point <= log_end_offset, and everything below it is fsynced;
- the epoch cache has no entry at or beyond the log end offset.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence

from tiercel.config.log_config import LogConfig
from tiercel.protocol.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from tiercel.storage.leader_epoch_cache import LeaderEpochFileCache
from tiercel.storage.local_log import LocalLog
from tiercel.storage.log_dir_failure_channel import LogDirFailureChannel
from tiercel.storage.log_retention import delete_old_segments
from tiercel.storage.log_roll import maybe_roll, roll
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.log_transactions import (
    complete_txns,
    last_stable_offset,
    with_aborted_transactions,
)
from tiercel.storage.log_truncation import truncate_fully_and_start_at, truncate_to
from tiercel.storage.log_validator import ValidatedRecords, assign_offsets
from tiercel.storage.log_values import (
    AppendBatch,
    FetchDataInfo,
    FetchIsolation,
    LogAppendInfo,
    LogOffsetMetadata,
    TimestampAndOffset,
)
from tiercel.storage.producer_append_info import AppendOrigin, duplicate_append_info
from tiercel.storage.producer_state import AnalyzedAppend, ProducerStateManager
from tiercel.storage.replicated_records import (
    UnexpectedAppendOffsetError,
    follower_append_info,
    replicated_batches,
    segment_runs,
)
from tiercel.storage.scheduler import CoalescingWriter, Scheduler
from tiercel.storage.snapshot_io import ExecutorSnapshotIo
from tiercel.storage.timestamp_lookup import max_timestamp_and_offset, offset_by_timestamp
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.verification_guard import SENTINEL, VerificationGuard

__all__ = ["UnexpectedAppendOffsetError", "UnifiedLog", "now_ms"]


def now_ms() -> int:
    return int(time.time() * 1000)


class UnifiedLog:
    def __init__(
        self,
        directory: str,
        topic_partition: TopicPartition,
        config: LogConfig,
        segments: list[LogSegment],
        log_start_offset: int,
        recovery_point: int,
        leader_epoch_cache: LeaderEpochFileCache,
        scheduler: Scheduler,
        topic_id: uuid.UUID | None = None,
        producer_state: ProducerStateManager | None = None,
        log_dir_failure_channel: LogDirFailureChannel | None = None,
        remote_log_enabled: bool = False,
    ) -> None:
        """Built by `load_log`, which recovers the segments and rebuilds the producer
        state first; ``producer_state`` None is a new log's (no producer seen yet). I/O
        errors take the log dir offline in ``log_dir_failure_channel`` (the broker's;
        by default one of this log's own). ``remote_log_enabled``: Kafka's
        remoteLogEnabled() (`is_remote_log_enabled`)."""
        channel = log_dir_failure_channel or LogDirFailureChannel()
        self.local_log = LocalLog(directory, topic_partition, config, segments, scheduler, channel)
        self.dir = directory
        self.parent_dir = self.local_log.parent_dir
        self.topic_partition = topic_partition
        self.topic_id = topic_id
        self._scheduler = scheduler
        self.leader_epoch_cache = leader_epoch_cache
        # The cache snapshots its own entries when flushing, under its own lock. A log
        # deleted meanwhile writes nothing: its directory name may already be reused.
        self._epoch_checkpoint: CoalescingWriter[None] = CoalescingWriter(
            scheduler,
            lambda: None,
            lambda _: self.deleted or self._write_epoch_checkpoint(),
            f"{directory}/leader-epoch-checkpoint",
        )
        self._remote_log_enabled = remote_log_enabled
        # Highest offset copied to the remote tier, inclusive (-1: none yet).
        self._highest_offset_in_remote_storage = -1
        # Without a remote tier nothing below the first local segment can be read.
        first = segments[0].base_offset
        self.log_start_offset = (
            log_start_offset if remote_log_enabled else max(log_start_offset, first)
        )
        self._local_log_start_offset = max(log_start_offset, first)
        self.recovery_point = min(recovery_point, self.log_end_offset)
        self._last_flush_ms = now_ms()
        # Told of every truncation: the LogManager checkpoints the lowered recovery point.
        self.truncation_listener: Callable[[UnifiedLog], None] = lambda log: None
        if producer_state is None:
            producer_state = ProducerStateManager(topic_partition, directory)
            producer_state.update_map_end_offset(self.log_end_offset)
        self._snapshot_io = ExecutorSnapshotIo(
            scheduler,
            f"producer snapshot {topic_partition}",
            lambda job: self.local_log.guarded("Error while writing a producer snapshot", job),
        )
        producer_state.set_io(self._snapshot_io)
        self.producer_state = producer_state
        self._high_watermark = LogOffsetMetadata(self.log_start_offset)
        self.update_high_watermark(self.log_start_offset)

    def _write_epoch_checkpoint(self) -> bool:
        with self.local_log.maybe_handle_io_exception("Error while writing an epoch checkpoint"):
            return self.leader_epoch_cache.flush()

    @property
    def deleted(self) -> bool:
        return self.local_log.deleted

    # -- offsets -----------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self.local_log.config

    def update_config(self, config: LogConfig) -> None:
        self.local_log.config = config

    @property
    def remote_log_enabled(self) -> bool:
        """Kafka's remoteLogEnabled(): the broker runs the remote tier and the topic
        (not an internal one) has remote.storage.enable."""
        return self._remote_log_enabled

    def set_remote_log_enabled(self, enabled: bool) -> None:
        self._remote_log_enabled = enabled

    @property
    def highest_offset_in_remote_storage(self) -> int:
        """The last offset copied to the remote tier (-1: none); local retention deletes
        only segments at or below it."""
        return self._highest_offset_in_remote_storage

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """Only forward, and only with the remote tier on (Kafka's
        updateHighestOffsetInRemoteStorage)."""
        if self._remote_log_enabled and offset > self._highest_offset_in_remote_storage:
            self._highest_offset_in_remote_storage = offset

    def reset_highest_offset_in_remote_storage(self) -> None:
        """Nothing is remote any more: the remote data was deleted with remote storage
        turned off (KIP-950)."""
        self._highest_offset_in_remote_storage = -1

    @property
    def local_log_start_offset(self) -> int:
        """The first offset on local disk (ListOffsets -4, EARLIEST_LOCAL_TIMESTAMP);
        the log start offset itself while there is no remote tier."""
        return self._local_log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.local_log.log_end_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self.local_log.log_end_offset_metadata

    @property
    def high_watermark(self) -> int:
        return self._high_watermark.message_offset

    @property
    def high_watermark_metadata(self) -> LogOffsetMetadata:
        """The HW with its segment position, computed on first use after a change."""
        hw = self._high_watermark
        if hw.message_offset_only:
            hw = self.local_log.offset_metadata(hw.message_offset)
            self._high_watermark = hw
        return hw

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to [log start, log end]; returns the value set."""
        offset = min(max(offset, self.log_start_offset), self.log_end_offset)
        if offset == self.log_end_offset:
            self._high_watermark = self.log_end_offset_metadata
        elif offset != self._high_watermark.message_offset:
            self._high_watermark = LogOffsetMetadata(offset)
        self.producer_state.on_high_watermark_updated(offset)
        return offset

    def maybe_increment_high_watermark(self, new_high_watermark: LogOffsetMetadata) -> bool:
        """The leader's HW advance: only forward, never past the log end offset; keeps
        the segment position ``new_high_watermark`` carries. True if it moved."""
        offset = new_high_watermark.message_offset
        if offset <= self._high_watermark.message_offset:
            return False
        if offset >= self.log_end_offset:
            self._high_watermark = self.log_end_offset_metadata
        else:
            self._high_watermark = new_high_watermark
        self.producer_state.on_high_watermark_updated(offset)
        return True

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest transaction not yet decided or whose marker
        is not yet replicated, not below the log start, else the HW (Kafka's
        UnifiedLog.lastStableOffset): read_committed reads stop there."""
        return last_stable_offset(self.producer_state, self.log_start_offset, self.high_watermark)

    @property
    def last_stable_offset_metadata(self) -> LogOffsetMetadata:
        offset = self.last_stable_offset
        if offset == self.high_watermark:
            return self.high_watermark_metadata
        return self.local_log.offset_metadata(offset)

    @property
    def active_segment(self) -> LogSegment:
        return self.local_log.active_segment

    @property
    def segments(self) -> Sequence[LogSegment]:
        return self.local_log.segments

    @property
    def size(self) -> int:
        return self.local_log.size

    # -- append ------------------------------------------------------------------------

    def append(
        self, batches: Sequence[AppendBatch], origin: AppendOrigin = AppendOrigin.REPLICATION
    ) -> None:
        """Write batches whose offsets are already assigned (starting at the log end
        offset: a follower's, a replay, or a coordinator's marker), after the producer
        state checks ``origin`` calls for (none for REPLICATION)."""
        if not batches:
            return
        analyzed = self.producer_state.prepare_append(batches, origin)
        self._append_batches(batches)
        self._update_producer_state(analyzed, batches[-1].last_offset + 1)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo | None:
        """Append what the leader sent, as it is: its offsets (gaps allowed, where the
        leader compacted) and its epochs, which the epoch cache takes from the batches
        (Kafka's LeaderEpochFileCache.assign); the producer state replays them. Structure
        and CRC are checked first (`replicated_batches`); None when no whole batch came.

        UnexpectedAppendOffsetError when the first batch starts below the log end."""
        batches = replicated_batches(records)
        if not batches:
            return None
        first = batches[0]
        if first.base_offset < self.log_end_offset:
            raise UnexpectedAppendOffsetError(
                f"first offset {first.base_offset} of an append to {self.topic_partition} is "
                f"below its log end offset {self.log_end_offset}",
                first.base_offset,
                first.last_offset,
            )
        for run in segment_runs(batches, self.config.segment_bytes):
            self.append(run)
        return follower_append_info(batches, self.log_start_offset)

    def _append_batches(self, batches: Sequence[AppendBatch]) -> None:
        """Write ``batches``, rolling first when the active segment cannot take them."""
        size = sum(batch.size for batch in batches)
        last = batches[-1]
        max_timestamp = max(batch.max_timestamp for batch in batches)
        maybe_roll(self, size, max_timestamp, batches[0].base_offset, last.last_offset, now_ms())
        self.local_log.append(batches)
        for batch in batches:
            if batch.partition_leader_epoch >= 0:
                self.maybe_assign_epoch_start_offset(
                    batch.partition_leader_epoch, batch.base_offset
                )

    @property
    def needs_flush(self) -> bool:
        """``flush.messages`` unflushed records reached: fsync before acknowledging."""
        return self.log_end_offset - self.recovery_point >= self.config.flush_messages

    def maybe_start_transaction_verification(
        self, producer_id: int, sequence: int, epoch: int
    ) -> VerificationGuard:
        """The guard a transactional write of ``producer_id`` must present once its
        coordinator confirmed the partition is in its transaction; SENTINEL when its
        transaction is already open here (KIP-890 part 1, Kafka's method of this name)."""
        return self.producer_state.maybe_start_transaction_verification(
            producer_id, sequence, epoch, now_ms()
        )

    def append_as_leader(
        self,
        validated: ValidatedRecords,
        leader_epoch: int,
        now_ms: int,
        verification_guard: VerificationGuard = SENTINEL,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Assign offsets from the log end offset and stamp ``leader_epoch`` into the
        validated batches, check them against the producer state (a transaction's first
        write against ``verification_guard``), then append them.

        A client's retry of one of a producer's last five batches is not written again:
        the answer carries the offsets it was first written at (Kafka's duplicate). A
        coordinator's batch (``AppendOrigin.COORDINATOR``: a TxnOffsetCommit written
        with sequence 0, as Kafka's coordinator writes them) has its producer epoch
        checked, not its sequence."""
        batches, offset_of_max_timestamp, log_append_time = assign_offsets(
            validated,
            self.log_end_offset,
            leader_epoch,
            self.config.message_timestamp_type,
            now_ms,
        )
        analyzed = self.producer_state.prepare_append(batches, origin, verification_guard)
        if analyzed.duplicate is not None:
            return duplicate_append_info(analyzed.duplicate, validated.size, self.log_start_offset)
        self._append_batches(batches)
        self._update_producer_state(analyzed, batches[-1].last_offset + 1)
        return LogAppendInfo(
            first_offset=batches[0].base_offset,
            last_offset=batches[-1].last_offset,
            max_timestamp=max(batch.max_timestamp for batch in batches),
            offset_of_max_timestamp=offset_of_max_timestamp,
            log_append_time=log_append_time,
            log_start_offset=self.log_start_offset,
            num_messages=batches[-1].last_offset - batches[0].base_offset + 1,
            valid_bytes=sum(batch.size for batch in batches),
        )

    def _update_producer_state(self, analyzed: AnalyzedAppend, end: int) -> None:
        for info in analyzed.updates:
            self.producer_state.update(info)
        complete_txns(self.producer_state, analyzed.completed_txns, self.local_log)
        # Also without producers: a snapshot must say which offset it reflects.
        self.producer_state.update_map_end_offset(end)

    def maybe_assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        if self.leader_epoch_cache.assign(epoch, start_offset):
            self._epoch_checkpoint.request()

    def roll(self, expected_next_offset: int = 0) -> LogSegment:
        """Start a new active segment at max(``expected_next_offset``, log end offset)
        (no-op if the active one is empty and starts there) and flush the old one in the
        background, then advance the recovery point (`log_roll`)."""
        return roll(self, expected_next_offset)

    # -- flush -------------------------------------------------------------------------

    def schedule_flush(self, up_to: int | None = None) -> None:
        self._scheduler.spawn(self.flush(up_to), name=f"flush {self.topic_partition}")

    async def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to`` (default: the log end)
        in the executor, then move the recovery point."""
        target = self.log_end_offset if up_to is None else up_to
        if target <= self.recovery_point or self.deleted:
            return
        truncations = self.local_log.truncations
        await self.local_log.flush(self.recovery_point, target)
        if self.leader_epoch_cache.is_dirty:
            # Recovery only re-reads epochs from batches past the recovery point: the
            # entries for everything below it must be on disk before it moves.
            await self._epoch_checkpoint.flush()
        self._last_flush_ms = now_ms()
        # A truncation meanwhile may have replaced what was synced with unsynced data;
        # a failure in the dir meanwhile may have lost pages this fsync did not report
        # (Kafka never checkpoints an offline dir's recovery points).
        same = truncations == self.local_log.truncations
        if not self.deleted and same and not self.local_log.dir_offline:
            self.recovery_point = max(self.recovery_point, min(target, self.log_end_offset))

    @property
    def time_since_last_flush_ms(self) -> int:
        return now_ms() - self._last_flush_ms

    async def flush_epoch_checkpoint(self) -> None:
        await self._epoch_checkpoint.flush()

    # -- read --------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_length: int,
        isolation: FetchIsolation,
        min_one_message: bool,
    ) -> FetchDataInfo:
        """Bytes of whole batches from the one holding ``start_offset`` up to the bound
        of ``isolation`` (log end, HW or LSO); OffsetOutOfRangeError outside the log."""
        if start_offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self.topic_partition}: "
                f"[{self.log_start_offset}, {self.log_end_offset}]"
            )
        if isolation is FetchIsolation.LOG_END:
            max_offset = self.log_end_offset_metadata
        elif isolation is FetchIsolation.HIGH_WATERMARK:
            max_offset = self.high_watermark_metadata
        else:
            max_offset = self.last_stable_offset_metadata
        info = self.local_log.read(start_offset, max_length, max_offset, min_one_message)
        if isolation is FetchIsolation.TXN_COMMITTED:
            return with_aborted_transactions(self.local_log, start_offset, info)
        return info

    def epoch_for_offset(self, offset: int) -> int | None:
        return self.leader_epoch_cache.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) per the epoch cache: OffsetForLeaderEpoch's answer."""
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    async def fetch_offset_by_timestamp(self, target: int) -> TimestampAndOffset | None:
        """The first record with timestamp >= ``target`` (ListOffsets by time)."""
        found = await offset_by_timestamp(
            self.segments, target, self.log_start_offset, self._scheduler, self._raise_if_deleted
        )
        return None if found is None else self._with_epoch(*found)

    async def fetch_max_timestamp(self) -> TimestampAndOffset | None:
        """The record carrying the largest timestamp (ListOffsets -3, KIP-734)."""
        found = await max_timestamp_and_offset(
            self.segments, self.log_start_offset, self._scheduler
        )
        return None if found is None else self._with_epoch(*found)

    def _with_epoch(self, timestamp: int, offset: int) -> TimestampAndOffset:
        return TimestampAndOffset(timestamp, offset, self.epoch_for_offset(offset))

    def _raise_if_deleted(self) -> None:
        if self.deleted:
            raise UnknownTopicOrPartitionError(f"{self.topic_partition} was deleted")

    # -- retention, log start offset and truncation --------------------------------------

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Advance the log start offset (DeleteRecords, retention, remote deletion);
        segments wholly below it are removed by the next retention pass."""
        if new_start > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self.topic_partition} to "
                f"{new_start}, beyond the high watermark {self.high_watermark}"
            )
        if new_start <= self.log_start_offset:
            return False
        self._increment_log_start_offset(new_start)
        return True

    def _increment_log_start_offset(self, new_start: int) -> None:
        # The local start never stays below the log start (Kafka's
        # maybeIncrementLogStartOffset); without a remote tier they are equal.
        self.log_start_offset = new_start
        self._local_log_start_offset = max(new_start, self._local_log_start_offset)
        self.leader_epoch_cache.truncate_from_start(new_start)
        self._epoch_checkpoint.request()
        self.producer_state.on_log_start_offset_incremented(new_start)

    def maybe_increment_local_log_start_offset(self, new_start: int) -> None:
        """Local segments below ``new_start`` are gone; the remote tier still has them
        (Kafka's maybeIncrementLocalLogStartOffset)."""
        self._local_log_start_offset = max(self._local_log_start_offset, new_start)

    def delete_old_segments(self) -> int:
        """Apply retention (time, size, log start offset); returns segments deleted."""
        return delete_old_segments(self, self._is_segment_eligible_for_deletion, now_ms())

    @property
    def remote_copy_enabled(self) -> bool:
        """Kafka's remoteLogEnabledAndRemoteCopyEnabled: retention is local retention."""
        return self._remote_log_enabled and not self.config.remote_log_copy_disable

    def _is_segment_eligible_for_deletion(self, segment: LogSegment, next_base: int) -> bool:
        """Whether retention may delete ``segment`` from local disk (Kafka's
        isSegmentEligibleForDeletion): with the remote tier copying, only a segment
        already copied there, or one the log start offset has passed (DeleteRecords)."""
        if not self.remote_copy_enabled:
            return True
        passed = next_base <= self.log_start_offset and segment is not self.active_segment
        return 0 < next_base <= self._highest_offset_in_remote_storage + 1 or passed

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and above ``offset`` (a follower diverging from its
        leader, Kafka's ``UnifiedLog.truncateTo``); True if anything was removed. See
        `log_truncation.truncate_to`."""
        return truncate_to(self, offset, now_ms())

    def truncate_fully_and_start_at(self, offset: int, log_start_offset: int | None = None) -> None:
        """Drop every segment and restart the log, empty, at ``offset``, its log start
        offset at ``log_start_offset`` (default ``offset``): a follower starting at its
        leader's local start keeps the remote part below it (Kafka's
        truncateFullyAndStartAt)."""
        truncate_fully_and_start_at(self, offset, log_start_offset, now_ms())

    def reset_local_log_start_offset(self, offset: int) -> None:
        """Truncation only (`log_truncation`): the local log now starts at ``offset``,
        also below where it started, since a truncated log restarts lower."""
        self._local_log_start_offset = offset

    def request_epoch_checkpoint(self) -> None:
        """Write the epoch cache's checkpoint soon, coalesced with other changes; the
        write is skipped once the log is deleted."""
        self._epoch_checkpoint.request()

    @property
    def truncations(self) -> int:
        """How many truncations the log has seen: a cleaning compares it before its swap."""
        return self.local_log.truncations

    # -- lifecycle ---------------------------------------------------------------------

    async def close(self) -> None:
        """Flush everything, snapshot the producer state at the log end (so the next
        start replays nothing) and close the files (clean shutdown)."""
        await self.flush()
        await self._epoch_checkpoint.flush()
        self.producer_state.take_snapshot()
        await self._snapshot_io.drain()
        self.local_log.close()

    def delete(self) -> None:
        """Remove the partition directory (topic deletion, `LocalLog.delete`)."""
        self.local_log.deleted = True  # before anything can fail under the renamed dir
        self.producer_state.close()
        self.local_log.delete()
