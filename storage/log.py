"""Log: one partition's replica on disk — a sequence of segments, offsets and epochs.

Kafka splits this into UnifiedLog and LocalLog; one class is enough until tiered storage
adds remote segments. A partition directory ``<topic>-<partition>/`` holds the segments
(``<base offset>.log/.index/.timeindex``), ``leader-epoch-checkpoint`` and
``partition.metadata``.

Contract: event-loop only. Appends and reads are page-cache ``writev``/``pread`` on the
loop; every fsync, rename, deletion and checkpoint write goes through the `Scheduler`.

Invariants:
- segments are sorted by base offset and cover disjoint offset ranges, the last one is
  active; offsets are contiguous except where compaction removed records (gaps);
- log_start_offset <= high_watermark <= log_end_offset;
- recovery_point <= log_end_offset, and everything below it is fsynced;
- the epoch cache has no entry at or beyond the log end offset.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Final

from tiercel.config.log_config import LogConfig
from tiercel.config.log_format import log_event
from tiercel.protocol.compression import decompress
from tiercel.protocol.errors import (
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnknownTopicOrPartitionError,
)
from tiercel.protocol.record_batch import RECORDS_OFFSET, TimestampType, read_header
from tiercel.protocol.records import decode_records
from tiercel.storage.file_names import CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX
from tiercel.storage.leader_epoch_cache import LeaderEpochFileCache
from tiercel.storage.log_dir_failure_channel import (
    LogDirFailureChannel,
    check_log_dir_online,
    io_failure,
    maybe_handle_io_exception,
)
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.log_validator import ValidatedRecords, assign_offsets
from tiercel.storage.log_values import (
    AppendBatch,
    FetchDataInfo,
    FetchIsolation,
    LogAppendInfo,
    LogOffsetMetadata,
    TimestampAndOffset,
)
from tiercel.storage.producer_append_info import AppendOrigin, ProducerAppendInfo
from tiercel.storage.producer_state import ProducerStateManager
from tiercel.storage.producer_state_entry import BatchMetadata
from tiercel.storage.producer_state_loader import rebuild_producer_state
from tiercel.storage.replicated_records import replicated_batches
from tiercel.storage.scheduler import CoalescingWriter, Scheduler
from tiercel.storage.snapshot_io import ExecutorSnapshotIo
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.log")


def now_ms() -> int:
    return int(time.time() * 1000)


class UnexpectedAppendOffsetError(Exception):
    """A follower append whose first batch starts below the log end offset (Kafka's
    UnexpectedAppendOffsetException): the caller decides whether it can recover."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class Log:
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
    ) -> None:
        """Built by `load_log`, which recovers the segments and rebuilds the producer
        state first; ``producer_state`` None is a new log's (no producer seen yet). I/O
        errors take the log dir offline in ``log_dir_failure_channel`` (the broker's;
        by default one of this log's own)."""
        assert segments, "a log always has an active segment"
        self.dir = directory
        self.parent_dir = os.path.dirname(directory)
        self._failure_channel = log_dir_failure_channel or LogDirFailureChannel()
        self.topic_partition = topic_partition
        self.config = config
        self.topic_id = topic_id
        self._segments = segments
        self._base_offsets = [segment.base_offset for segment in segments]
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
        active = segments[-1]
        self._end_offset = LogOffsetMetadata(active.next_offset(), active.base_offset, active.size)
        self.log_start_offset = max(log_start_offset, segments[0].base_offset)
        self.recovery_point = min(recovery_point, self._end_offset.message_offset)
        self._high_watermark = LogOffsetMetadata(self.log_start_offset)
        self.update_high_watermark(self.log_start_offset)
        self._last_flush_ms = now_ms()
        self._truncations = 0
        self.deleted = False
        if producer_state is None:
            producer_state = ProducerStateManager(topic_partition, directory)
            producer_state.update_map_end_offset(self.log_end_offset)
        self._snapshot_io = ExecutorSnapshotIo(
            scheduler,
            f"producer snapshot {topic_partition}",
            lambda job: self._guarded("Error while writing a producer snapshot", job),
        )
        producer_state.set_io(self._snapshot_io)
        self.producer_state = producer_state

    def _io(self, message: str) -> contextlib.AbstractContextManager[None]:
        return maybe_handle_io_exception(
            self._failure_channel,
            self.parent_dir,
            f"{message} for {self.topic_partition}",
            lambda: self.deleted,
        )

    def _guarded(self, message: str, job: Callable[[], None]) -> Callable[[], None]:
        """``job`` (blocking, for the executor) with `_io`'s error handling."""

        def run() -> None:
            with self._io(message):
                job()

        return run

    def _write_epoch_checkpoint(self) -> bool:
        with self._io("Error while writing the leader-epoch-checkpoint"):
            return self.leader_epoch_cache.flush()

    # -- offsets -----------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._end_offset.message_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark.message_offset

    @property
    def high_watermark_metadata(self) -> LogOffsetMetadata:
        """The HW with its segment position, computed on first use after a change."""
        hw = self._high_watermark
        if hw.message_offset_only:
            hw = self._offset_metadata(hw.message_offset)
            self._high_watermark = hw
        return hw

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to [log start, log end]; returns the value set."""
        offset = min(max(offset, self.log_start_offset), self.log_end_offset)
        if offset == self.log_end_offset:
            self._high_watermark = self._end_offset
        elif offset != self._high_watermark.message_offset:
            self._high_watermark = LogOffsetMetadata(offset)
        return offset

    def maybe_increment_high_watermark(self, new_high_watermark: LogOffsetMetadata) -> bool:
        """The leader's HW advance: only forward, never past the log end offset; keeps
        the segment position ``new_high_watermark`` carries. True if it moved."""
        offset = new_high_watermark.message_offset
        if offset <= self._high_watermark.message_offset:
            return False
        if offset >= self.log_end_offset:
            self._high_watermark = self._end_offset
        else:
            self._high_watermark = new_high_watermark
        return True

    def _offset_metadata(self, offset: int) -> LogOffsetMetadata:
        if offset >= self.log_end_offset:
            return self._end_offset
        segment = self._floor_segment(offset)
        if segment is not None:
            batch = segment.translate_offset(offset)
            if batch is not None:
                return LogOffsetMetadata(offset, segment.base_offset, batch.position)
        return LogOffsetMetadata(offset)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> Sequence[LogSegment]:
        return tuple(self._segments)

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self._segments)

    def _floor_segment(self, offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self._base_offsets, offset) - 1
        return self._segments[i] if i >= 0 else None

    # -- append ------------------------------------------------------------------------

    def append(self, batches: Sequence[AppendBatch]) -> None:
        """Write batches whose offsets are already assigned (starting at the log end
        offset: a follower's, or a replay), updating the producer state unchecked."""
        if not batches:
            return
        updates, _ = self.producer_state.prepare_append(batches, AppendOrigin.REPLICATION)
        self._append_batches(batches)
        self._update_producer_state(updates, batches[-1].last_offset + 1)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo | None:
        """Append what the leader sent, as it is: its offsets (gaps allowed, where the
        leader compacted) and its epochs, which the epoch cache takes from the batches
        (seed 000's assign); the producer state replays them. Structure and CRC are
        checked first (`replicated_batches`); None when no whole batch arrived.

        UnexpectedAppendOffsetError when the first batch starts below the log end."""
        batches = replicated_batches(records)
        if not batches:
            return None
        first, last = batches[0], batches[-1]
        if first.base_offset < self.log_end_offset:
            raise UnexpectedAppendOffsetError(
                f"first offset {first.base_offset} of an append to {self.topic_partition} is "
                f"below its log end offset {self.log_end_offset}",
                first.base_offset,
                first.last_offset,
            )
        # Appended in runs that fit a segment: a fetch may carry more than segment.bytes
        # (Kafka refuses such an append; splitting it keeps the follower going).
        run: list[AppendBatch] = []
        run_size = 0
        for batch in batches:
            if batch.size > self.config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"a {batch.size}-byte batch fetched for {self.topic_partition} exceeds "
                    f"segment.bytes {self.config.segment_bytes}"
                )
            if run and run_size + batch.size > self.config.segment_bytes:
                self.append(run)
                run, run_size = [], 0
            run.append(batch)
            run_size += batch.size
        self.append(run)
        size = sum(batch.size for batch in batches)
        best = max(batches, key=lambda batch: batch.max_timestamp)
        return LogAppendInfo(
            first_offset=first.base_offset,
            last_offset=last.last_offset,
            max_timestamp=best.max_timestamp,
            offset_of_max_timestamp=best.last_offset,
            log_append_time=-1,
            log_start_offset=self.log_start_offset,
            num_messages=last.last_offset - first.base_offset + 1,
            valid_bytes=size,
        )

    def _append_batches(self, batches: Sequence[AppendBatch]) -> None:
        """Write ``batches``, rolling first when the active segment cannot take them."""
        size = sum(batch.size for batch in batches)
        last = batches[-1]
        max_timestamp = max(batch.max_timestamp for batch in batches)
        # `_io` inlined: this is the produce path.
        check_log_dir_online(self._failure_channel, self.parent_dir)
        try:
            segment = self._maybe_roll(size, max_timestamp, last.last_offset)
            segment.append(batches)
        except Exception as e:
            message = f"Error while appending records for {self.topic_partition}"
            failure = io_failure(self._failure_channel, self.parent_dir, message, e, self.deleted)
            if failure is e:
                raise
            raise failure from e
        self._end_offset = LogOffsetMetadata(
            last.last_offset + 1, segment.base_offset, segment.size
        )
        for batch in batches:
            if batch.partition_leader_epoch >= 0:
                self.maybe_assign_epoch_start_offset(
                    batch.partition_leader_epoch, batch.base_offset
                )

    @property
    def needs_flush(self) -> bool:
        """``flush.messages`` unflushed records reached: fsync before acknowledging."""
        return self.log_end_offset - self.recovery_point >= self.config.flush_messages

    def append_as_leader(
        self, validated: ValidatedRecords, leader_epoch: int, now_ms: int
    ) -> LogAppendInfo:
        """Assign offsets from the log end offset and stamp ``leader_epoch`` into the
        validated batches, check them against the producer state, then append them.

        A client's retry of one of a producer's last five batches is not written again:
        the answer carries the offsets it was first written at (Kafka's duplicate)."""
        batches, offset_of_max_timestamp, log_append_time = assign_offsets(
            validated,
            self.log_end_offset,
            leader_epoch,
            self.config.message_timestamp_type,
            now_ms,
        )
        updates, duplicate = self.producer_state.prepare_append(batches, AppendOrigin.CLIENT)
        if duplicate is not None:
            return self._duplicate_info(duplicate, validated.size)
        self._append_batches(batches)
        self._update_producer_state(updates, batches[-1].last_offset + 1)
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

    def _update_producer_state(self, updates: Sequence[ProducerAppendInfo], end: int) -> None:
        for info in updates:
            self.producer_state.update(info)
        # Also without producers: a snapshot must say which offset it reflects.
        self.producer_state.update_map_end_offset(end)

    def _duplicate_info(self, duplicate: BatchMetadata, size: int) -> LogAppendInfo:
        # As Kafka: the original offsets, and the batch's timestamp as log append time.
        return LogAppendInfo(
            first_offset=duplicate.first_offset,
            last_offset=duplicate.last_offset,
            max_timestamp=duplicate.timestamp,
            offset_of_max_timestamp=duplicate.last_offset,
            log_append_time=duplicate.timestamp,
            log_start_offset=self.log_start_offset,
            num_messages=duplicate.offset_delta + 1,
            valid_bytes=size,
        )

    def maybe_assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        if self.leader_epoch_cache.assign(epoch, start_offset):
            self._epoch_checkpoint.request()

    def _maybe_roll(self, messages_size: int, max_timestamp: int, max_offset: int) -> LogSegment:
        segment = self.active_segment
        config = self.config
        roll_ms = config.max_segment_ms - self._roll_jitter(segment.base_offset)
        if segment.should_roll(
            messages_size, max_timestamp, max_offset, config.segment_bytes, roll_ms, now_ms()
        ):
            return self.roll()
        return segment

    def _roll_jitter(self, base_offset: int) -> int:
        # A stable per-segment jitter so that many partitions do not roll in one instant.
        jitter = self.config.segment_jitter_ms
        return hash((str(self.topic_partition), base_offset)) % jitter if jitter > 0 else 0

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is
        empty) and flush the old one in the background, then advance the recovery point."""
        active = self.active_segment
        new_base = self.log_end_offset
        if active.size == 0 and active.base_offset == new_base:
            return active
        segment = LogSegment(
            self.dir, new_base, self.config.index_interval_bytes, self.config.segment_index_bytes
        )
        self._segments.append(segment)
        self._base_offsets.append(new_base)
        self._end_offset = LogOffsetMetadata(new_base, new_base, 0)
        # A snapshot at every segment base: loading replays at most the segments after
        # the latest one, and retention deletes a segment's snapshot with it.
        self.producer_state.update_map_end_offset(new_base)
        self.producer_state.take_snapshot()
        log_event(
            _log,
            logging.INFO,
            "segment_rolled",
            partition=str(self.topic_partition),
            base_offset=new_base,
        )
        self.schedule_flush(new_base)
        return segment

    # -- flush -------------------------------------------------------------------------

    def schedule_flush(self, up_to: int | None = None) -> None:
        self._scheduler.spawn(self.flush(up_to), name=f"flush {self.topic_partition}")

    async def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to`` (default: the log end)
        in the executor, then move the recovery point."""
        target = self.log_end_offset if up_to is None else up_to
        if target <= self.recovery_point or self.deleted:
            return
        with self._io(f"Error while flushing log up to offset {target}"):
            await self._flush_to(target)

    async def _flush_to(self, target: int) -> None:
        truncations = self._truncations
        first = max(bisect.bisect_right(self._base_offsets, self.recovery_point) - 1, 0)
        segments = [s for s in self._segments[first:] if s.base_offset < target and not s.closed]
        for segment in segments:
            segment.pin()
        try:
            await self._scheduler.run_blocking(_flush_segments, segments, self.dir)
        finally:
            for segment in segments:
                segment.unpin()
        if self.leader_epoch_cache.is_dirty:
            # Recovery only re-reads epochs from batches past the recovery point: the
            # entries for everything below it must be on disk before it moves.
            await self._epoch_checkpoint.flush()
        self._last_flush_ms = now_ms()
        # A truncation meanwhile may have replaced what was synced with unsynced data;
        # a failure in the dir meanwhile may have lost pages this fsync did not report
        # (Kafka never checkpoints an offline dir's recovery points).
        if (
            not self.deleted
            and truncations == self._truncations
            and not self._failure_channel.has_offline_log_dir(self.parent_dir)
        ):
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
        end = self._end_offset
        if start_offset < self.log_start_offset or start_offset > end.message_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self.topic_partition}: "
                f"[{self.log_start_offset}, {end.message_offset}]"
            )
        max_offset = end if isolation is FetchIsolation.LOG_END else self.high_watermark_metadata
        if start_offset >= max_offset.message_offset:
            return FetchDataInfo(self._offset_metadata(start_offset), b"")
        i = bisect.bisect_right(self._base_offsets, start_offset) - 1
        for segment in self._segments[max(i, 0) :]:
            if segment.base_offset >= max_offset.message_offset:
                break
            if max_offset.segment_base_offset == segment.base_offset:
                max_position = max_offset.relative_position_in_segment
            else:
                max_position = segment.size
            result = segment.read(start_offset, max_length, max_position, min_one_message)
            if result is not None:
                return FetchDataInfo(result[0], result[1])
        return FetchDataInfo(LogOffsetMetadata(start_offset), b"")

    def epoch_for_offset(self, offset: int) -> int | None:
        return self.leader_epoch_cache.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) per the epoch cache: OffsetForLeaderEpoch's answer."""
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    async def fetch_offset_by_timestamp(self, target: int) -> TimestampAndOffset | None:
        """The first record with timestamp >= ``target`` (ListOffsets by time): the time
        index narrows the search to one batch, whose records are decoded off the loop."""
        for segment in list(self._segments):  # retention may change the list meanwhile
            if segment.closed or segment.largest_timestamp() < target:
                continue
            for batch in segment.batches_by_timestamp(target, self.log_start_offset):
                data = segment.read_batch(batch)
                found = await self._scheduler.run_blocking(
                    first_record_at_or_after, data, target, self.log_start_offset
                )
                if self.deleted:
                    raise UnknownTopicOrPartitionError(f"{self.topic_partition} was deleted")
                if found is not None:
                    offset = found[1]
                    return TimestampAndOffset(found[0], offset, self.epoch_for_offset(offset))
                if segment.closed or segment.size < batch.position + batch.size:
                    break  # deleted or truncated while we decoded: the rest is gone
        return None

    async def fetch_max_timestamp(self) -> TimestampAndOffset | None:
        """The record carrying the largest timestamp (ListOffsets -3, KIP-734)."""
        best: LogSegment | None = None
        for segment in self._segments:
            if best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far:
                best = segment
        if best is None or best.max_timestamp_so_far < 0:
            return None
        batch = best.translate_offset(best.offset_of_max_timestamp_so_far)
        if batch is None:
            return None
        data = best.read_batch(batch)
        found = await self._scheduler.run_blocking(
            first_record_at_or_after, data, best.max_timestamp_so_far, self.log_start_offset
        )
        if found is None:
            return None
        return TimestampAndOffset(found[0], found[1], self.epoch_for_offset(found[1]))

    # -- retention, log start offset and truncation --------------------------------------

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Advance the log start offset (DeleteRecords, retention); segments wholly
        below it are removed by the next retention pass."""
        if new_start > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self.topic_partition} to "
                f"{new_start}, beyond the high watermark {self.high_watermark}"
            )
        if new_start <= self.log_start_offset:
            return False
        self.log_start_offset = new_start
        self.leader_epoch_cache.truncate_from_start(new_start)
        self._epoch_checkpoint.request()
        self.producer_state.on_log_start_offset_incremented(new_start)
        return True

    def delete_old_segments(self) -> int:
        """Apply retention (time, size, log start offset); returns segments deleted."""
        now = now_ms()
        config = self.config
        deletable: list[LogSegment] = []
        excess = self.size - config.retention_bytes if config.retention_bytes >= 0 else -1
        upper_bound = self.high_watermark
        for i, segment in enumerate(self._segments):
            next_base = (
                self._segments[i + 1].base_offset
                if i + 1 < len(self._segments)
                else self.log_end_offset
            )
            if next_base > upper_bound or (segment.size == 0 and next_base == segment.base_offset):
                break
            breached_start = next_base <= self.log_start_offset
            breached_time = (
                config.delete
                and config.retention_ms >= 0
                and (now - segment.largest_timestamp() > config.retention_ms)
            )
            breached_size = config.delete and excess - segment.size >= 0
            if not (breached_start or breached_time or breached_size):
                break
            excess -= segment.size
            deletable.append(segment)
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            self.roll()
        self._delete_segments(deletable, reason="retention")
        return len(deletable)

    def _delete_segments(self, segments: list[LogSegment], reason: str) -> None:
        count = len(segments)
        assert self._segments[:count] == segments
        del self._segments[:count]
        del self._base_offsets[:count]
        new_start = self._segments[0].base_offset
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            self._epoch_checkpoint.request()
            self.producer_state.on_log_start_offset_incremented(new_start)
        for segment in segments:
            self.producer_state.delete_snapshot(segment.base_offset)
            log_event(
                _log,
                logging.INFO,
                "segment_deleted",
                partition=str(self.topic_partition),
                base_offset=segment.base_offset,
                size=segment.size,
                reason=reason,
            )
        self._schedule_removal(segments)

    def _schedule_removal(self, segments: list[LogSegment]) -> None:
        """Rename the files to ``.deleted`` now, so the names are free for a new segment
        at once (a rename is a metadata update, as cheap as an append), and remove them
        in the executor after ``file.delete.delay.ms``, as Kafka does."""
        with self._io("Error while deleting segments"):
            paths = [path for segment in segments for path in segment.rename_to_deleted()]
        scheduler = self._scheduler
        job = self._guarded("Error while deleting segments", lambda: _remove_files(paths))

        def remove() -> None:
            scheduler.run_blocking_in_background(job, name="delete segments")

        scheduler.call_later(self.config.file_delete_delay_ms / 1000, remove)

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and above ``offset`` (a follower diverging from its
        leader, seed 000's ``Log.truncateTo``); True if anything was removed.

        The log end offset becomes ``offset`` itself, as Kafka sets it, also when the
        records just below it were compacted away (a gap). Only when a batch straddles
        ``offset`` (Kafka never truncates there: epoch and end offsets are batch
        boundaries) does the log end where that batch began, since batches go whole.
        At or beyond the log end nothing is removed but the epoch cache still loses
        entries starting there: a leader's epoch that never got a record (Kafka)."""
        if offset >= self.log_end_offset:
            entries = self.leader_epoch_cache.entries
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            if self.leader_epoch_cache.entries != entries:
                self._epoch_checkpoint.request()
            return False
        self._truncations += 1
        if offset <= self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        doomed = [s for s in self._segments if s.base_offset >= offset]
        if doomed:
            count = len(doomed)
            del self._segments[-count:]
            del self._base_offsets[-count:]
            self._schedule_removal(doomed)
        active = self.active_segment
        straddling = active.translate_offset(offset)
        new_end = offset
        if straddling is not None and straddling.header.base_offset < offset:
            new_end = straddling.header.base_offset
        removed = active.truncate_to(offset)
        self._end_offset = LogOffsetMetadata(new_end, active.base_offset, active.size)
        # Cutting inside the batch that holds the log start offset ends the log below it;
        # the start follows the end down (Kafka's min(target, log start)).
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self._epoch_checkpoint.request()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.update_high_watermark(min(self.high_watermark, self.log_end_offset))
        for segment in doomed:
            self.producer_state.delete_snapshot(segment.base_offset)
        # On the loop, as Kafka does under its log lock: one small snapshot read and a
        # header scan of at most the segment that was cut.
        rebuild_producer_state(
            self.producer_state,
            self._segments,
            self.log_start_offset,
            self.log_end_offset,
            False,
            now_ms(),
        )
        log_event(
            _log,
            logging.INFO,
            "log_truncated",
            partition=str(self.topic_partition),
            offset=offset,
            bytes_removed=removed,
            segments_removed=len(doomed),
        )
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log, empty, at ``offset``."""
        self._truncations += 1
        doomed = list(self._segments)
        self._schedule_removal(doomed)
        self._segments = [
            LogSegment(
                self.dir, offset, self.config.index_interval_bytes, self.config.segment_index_bytes
            )
        ]
        self._base_offsets = [offset]
        self._end_offset = LogOffsetMetadata(offset, offset, 0)
        self.log_start_offset = offset
        self.recovery_point = offset
        self.leader_epoch_cache.clear()
        self._epoch_checkpoint.request()
        self.producer_state.truncate_fully_and_start_at(offset)
        rebuild_producer_state(self.producer_state, self._segments, offset, offset, False, now_ms())
        self.update_high_watermark(offset)

    @property
    def truncations(self) -> int:
        """How many truncations the log has seen: a cleaning compares it before its swap."""
        return self._truncations

    def replace_segments(
        self, cleaned: LogSegment, old: Sequence[LogSegment], truncations: int
    ) -> bool:
        """Swap ``cleaned`` (files ``.cleaned``, fsynced, same base offset as ``old[0]``)
        in for the consecutive non-active segments ``old``, crash-safely as Kafka's
        replaceSegments: rename it ``.swap``, swap in memory, rename ``old`` ``.deleted``,
        drop the suffix; a crash between two renames is completed at load. False, and
        nothing changed, when the log changed meanwhile: deleted, truncated since
        ``truncations``, or ``old`` no longer its segments."""
        if self.deleted or truncations != self._truncations:
            return False
        i = next((n for n, s in enumerate(self._segments) if s is old[0]), -1)
        count = len(old)
        current = self._segments[i : i + count] if i >= 0 else []
        if len(current) != count or any(a is not b for a, b in zip(current, old, strict=True)):
            return False
        assert i + count < len(self._segments), "the active segment is never cleaned"
        cleaned.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
        self._segments[i : i + count] = [cleaned]
        self._base_offsets[i : i + count] = [cleaned.base_offset]
        self._schedule_removal(list(old))
        for segment in old[1:]:
            # Kafka drops the producer snapshots of the segments gone, not replaced.
            self.producer_state.delete_snapshot(segment.base_offset)
        cleaned.change_file_suffixes(SWAP_FILE_SUFFIX, "")
        # Once synced, the final names survive a power loss (a deleted log's name may
        # already be reused: leave it).
        self._scheduler.run_blocking_in_background(
            self._sync_dir_unless_deleted, name=f"sync {self.topic_partition}"
        )
        log_event(
            _log,
            logging.INFO,
            "segments_replaced",
            partition=str(self.topic_partition),
            base_offset=cleaned.base_offset,
            replaced=count,
            size_before=sum(s.size for s in old),
            size_after=cleaned.size,
        )
        return True

    def _sync_dir_unless_deleted(self) -> None:
        if not self.deleted:
            _sync_dir(self.dir)

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    # -- lifecycle ---------------------------------------------------------------------

    async def close(self) -> None:
        """Flush everything, snapshot the producer state at the log end (so the next
        start replays nothing) and close the files (clean shutdown)."""
        await self.flush()
        await self._epoch_checkpoint.flush()
        self.producer_state.take_snapshot()
        await self._snapshot_io.drain()
        for segment in self._segments:
            segment.close()

    def delete(self) -> None:
        """Remove the partition directory (topic deletion). It is renamed at once with
        Kafka's ``.<id>-delete`` suffix — a metadata update, so a topic recreated under
        the same name never meets the old files — then removed in the background."""
        self.deleted = True
        self.producer_state.close()
        for segment in self._segments:
            segment.close()
        doomed = f"{self.dir}.{uuid.uuid4().hex}-delete"
        os.rename(self.dir, doomed)
        self._scheduler.run_blocking_in_background(
            shutil.rmtree, doomed, True, name=f"remove {os.path.basename(doomed)}"
        )


def _flush_segments(segments: list[LogSegment], directory: str) -> None:
    # Pinned by the caller, so their descriptors stay open even if they are closed
    # (deleted, truncated away) while this runs.
    for segment in segments:
        segment.flush()
    # New segment files exist after a crash only once their directory entry is synced.
    _sync_dir(directory)


def _sync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def first_record_at_or_after(batch: bytes, target: int, min_offset: int) -> tuple[int, int] | None:
    """(timestamp, offset) of the batch's first record at or after ``min_offset`` whose
    timestamp is >= ``target``. Pure; runs in the executor (it may decompress)."""
    header = read_header(batch, 0)
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        offset = max(header.base_offset, min_offset)
        return (header.max_timestamp, offset) if header.max_timestamp >= target else None
    data = decompress(header.compression, memoryview(batch)[RECORDS_OFFSET:])
    for record in decode_records(data, header.records_count):
        timestamp = header.base_timestamp + record.timestamp_delta
        offset = header.base_offset + record.offset_delta
        if timestamp >= target and offset >= min_offset:
            return timestamp, offset
    return None


def _remove_files(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
