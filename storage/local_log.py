"""LocalLog: the segments of one partition replica on local disk (Kafka 3.x's LocalLog).

It owns the segment list, rolling, local reads, local truncation and the removal of
segment files; it knows nothing of the log start offset, the high watermark, leader
epochs, producers or any remote tier — `UnifiedLog` decides those and calls in here.
A partition directory ``<topic>-<partition>/`` holds the segments
(``<base offset>.log/.index/.timeindex``).

Contract: event-loop only. Appends and reads are page-cache ``writev``/``pread`` on the
loop; every fsync and deletion goes through the `Scheduler`. An I/O error in any of them
takes the log dir offline in the broker's `LogDirFailureChannel` (Kafka's
LocalLog.maybeHandleIOException), and nothing touches an offline dir again.

Invariants: segments are sorted by base offset and cover disjoint offset ranges; the last
one is active and never absent; the log end offset is at or past the active segment's
base offset.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from tiercel.config.log_config import LogConfig
from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import OffsetOutOfRangeError
from tiercel.storage.file_names import CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX
from tiercel.storage.log_dir_failure_channel import (
    LogDirFailureChannel,
    check_log_dir_online,
    io_failure,
    maybe_handle_io_exception,
)
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.log_values import AppendBatch, FetchDataInfo, LogOffsetMetadata
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.transaction_index import AbortedTxn

_log: Final = logging.getLogger("tiercel.log")


@dataclass(frozen=True, slots=True)
class LocalTruncation:
    """What `LocalLog.truncate_to` removed: whole segments and bytes of the active one."""

    deleted_segments: list[LogSegment]
    bytes_removed: int


class LocalLog:
    def __init__(
        self,
        directory: str,
        topic_partition: TopicPartition,
        config: LogConfig,
        segments: list[LogSegment],
        scheduler: Scheduler,
        log_dir_failure_channel: LogDirFailureChannel,
    ) -> None:
        assert segments, "a log always has an active segment"
        self.dir = directory
        self.parent_dir = os.path.dirname(directory)
        self.log_dir_failure_channel = log_dir_failure_channel
        # Set by `delete`: an I/O error after the directory was renamed away is not the
        # disk's and takes no dir offline.
        self.deleted = False
        # Counts truncations (`truncate_to`, `truncate_fully_and_start_at`): a flush, a
        # cleaning or a remote copy that began before one must not trust what it read.
        self.truncations = 0
        self.topic_partition = topic_partition
        self.config = config
        self._segments = segments
        self._base_offsets = [segment.base_offset for segment in segments]
        self._scheduler = scheduler
        active = segments[-1]
        self._end_offset = LogOffsetMetadata(active.next_offset(), active.base_offset, active.size)

    # -- I/O errors ----------------------------------------------------------------------

    @property
    def dir_offline(self) -> bool:
        return self.log_dir_failure_channel.has_offline_log_dir(self.parent_dir)

    @contextlib.contextmanager
    def maybe_handle_io_exception(self, message: str) -> Iterator[None]:
        with maybe_handle_io_exception(
            self.log_dir_failure_channel,
            self.parent_dir,
            f"{message} for {self.topic_partition}",
            lambda: self.deleted,
        ):
            yield

    def guarded(self, message: str, job: Callable[[], object]) -> Callable[[], None]:
        """``job`` (blocking, for the executor) with `maybe_handle_io_exception`."""

        def run() -> None:
            with self.maybe_handle_io_exception(message):
                job()

        return run

    # -- offsets and segments ------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._end_offset.message_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._end_offset

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> Sequence[LogSegment]:
        return tuple(self._segments)

    @property
    def first_segment_base_offset(self) -> int:
        return self._base_offsets[0]

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self._segments)

    def floor_segment(self, offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self._base_offsets, offset) - 1
        return self._segments[i] if i >= 0 else None

    def segments_from(self, offset: int) -> Sequence[LogSegment]:
        """The segments from the one holding ``offset`` (the first one if none does)."""
        i = bisect.bisect_right(self._base_offsets, offset) - 1
        return self._segments[max(i, 0) :]

    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """``offset`` with its segment position when a batch starts there (Kafka's
        convertToOffsetMetadataOrThrow, without the throw: message offset only else)."""
        if offset >= self.log_end_offset:
            return self._end_offset
        segment = self.floor_segment(offset)
        if segment is not None:
            batch = segment.translate_offset(offset)
            if batch is not None:
                return LogOffsetMetadata(offset, segment.base_offset, batch.position)
        return LogOffsetMetadata(offset)

    # -- append and roll ---------------------------------------------------------------

    def append(self, batches: Sequence[AppendBatch]) -> None:
        """Write ``batches`` (offsets assigned, at or past the log end, fitting the
        active segment: the caller rolls first) and move the log end offset past them."""
        segment = self.active_segment
        # `maybe_handle_io_exception` inlined: this is the produce path.
        check_log_dir_online(self.log_dir_failure_channel, self.parent_dir)
        try:
            segment.append(batches)
        except Exception as e:
            message = f"Error while appending records for {self.topic_partition}"
            channel = self.log_dir_failure_channel
            failure = io_failure(channel, self.parent_dir, message, e, self.deleted)
            if failure is e:
                raise
            raise failure from e
        last = batches[-1]
        self._end_offset = LogOffsetMetadata(
            last.last_offset + 1, segment.base_offset, segment.size
        )

    def roll(self, expected_next_offset: int = 0) -> LogSegment:
        """A new active segment at max(``expected_next_offset``, log end offset), as
        Kafka's LocalLog.roll (the active segment itself when it is empty and already
        starts there). The log end offset stays: a base beyond it is a follower's
        append jumping ahead, which lands in the new segment at once."""
        active = self.active_segment
        new_base = max(expected_next_offset, self.log_end_offset)
        if active.base_offset == new_base:
            assert active.size == 0, "a segment with records ends past its base offset"
            return active
        with self.maybe_handle_io_exception(f"Error while rolling a segment at {new_base}"):
            segment = LogSegment(
                self.dir,
                new_base,
                self.config.index_interval_bytes,
                self.config.segment_index_bytes,
            )
        self._segments.append(segment)
        self._base_offsets.append(new_base)
        self._end_offset = LogOffsetMetadata(self.log_end_offset, new_base, 0)
        return segment

    # -- read --------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_length: int,
        max_offset: LogOffsetMetadata,
        min_one_message: bool,
    ) -> FetchDataInfo:
        """Bytes of whole batches from the one holding ``start_offset`` up to
        ``max_offset``; OffsetOutOfRangeError past the log end or below the first
        segment."""
        end = self._end_offset
        if start_offset > end.message_offset or start_offset < self._base_offsets[0]:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self.topic_partition}: "
                f"[{self._base_offsets[0]}, {end.message_offset}]"
            )
        if start_offset >= max_offset.message_offset:
            return FetchDataInfo(self.offset_metadata(start_offset), b"")
        for segment in self.segments_from(start_offset):
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

    def fetch_upper_bound_offset(self, start: LogOffsetMetadata, size: int) -> int:
        """An offset no record of the ``size`` bytes read from ``start`` (with its
        segment position) reaches: the first index entry past them, else the next
        segment's base or the log end (Kafka's LocalLog.addAbortedTransactions)."""
        i = bisect.bisect_right(self._base_offsets, start.segment_base_offset) - 1
        index = self._segments[i].offset_index
        upper = index.fetch_upper_bound_offset(start.relative_position_in_segment + size)
        if upper is not None:
            return upper
        return self._base_offsets[i + 1] if i + 1 < len(self._segments) else self.log_end_offset

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound), from the
        transaction indexes of the segment holding ``start_offset`` on, until one says
        no later segment can add any (Kafka's LocalLog.collectAbortedTransactions)."""
        found: list[AbortedTxn] = []
        for segment in self.segments_from(start_offset):
            if segment.txn_index.is_empty:
                # Nothing to list or settle; passed over at the cost of an attribute
                # check, since a log of hundreds of segments is walked on every fetch.
                continue
            result = segment.txn_index.collect_aborted_txns(start_offset, upper_bound)
            found.extend(result.aborted)
            if result.is_complete:
                break
        return found

    # -- truncation and deletion ---------------------------------------------------------

    def truncate_to(self, offset: int) -> LocalTruncation:
        """Remove every batch from the one holding ``offset`` on. The log end offset
        becomes ``offset`` itself, also when the records just below it were compacted
        away (a gap); only when a batch straddles ``offset`` does the log end where
        that batch began, since batches go whole. As Kafka's LocalLog.truncateTo, the
        segments starting above ``offset`` go and the one starting at it stays, emptied;
        the caller makes sure one remains (``offset`` at or above the first segment's
        base offset)."""
        self.truncations += 1
        doomed = [s for s in self._segments if s.base_offset > offset]
        if doomed:
            count = len(doomed)
            del self._segments[-count:]
            del self._base_offsets[-count:]
            self.schedule_removal(doomed)
        active = self.active_segment
        straddling = active.translate_offset(offset)
        new_end = offset
        if straddling is not None and straddling.header.base_offset < offset:
            new_end = straddling.header.base_offset
        removed = active.truncate_to(offset)
        self._end_offset = LogOffsetMetadata(new_end, active.base_offset, active.size)
        return LocalTruncation(doomed, removed)

    def truncate_fully_and_start_at(self, offset: int) -> list[LogSegment]:
        """Drop every segment and restart, empty, at ``offset``; the segments dropped."""
        self.truncations += 1
        doomed = list(self._segments)
        self.schedule_removal(doomed)
        self._segments = [
            LogSegment(
                self.dir, offset, self.config.index_interval_bytes, self.config.segment_index_bytes
            )
        ]
        self._base_offsets = [offset]
        self._end_offset = LogOffsetMetadata(offset, offset, 0)
        return doomed

    def remove_oldest_segments(self, segments: Sequence[LogSegment]) -> None:
        """Take the first ``len(segments)`` segments — ``segments`` themselves, never
        the active one — out of the log and delete their files."""
        count = len(segments)
        assert list(self._segments[:count]) == list(segments) and count < len(self._segments)
        del self._segments[:count]
        del self._base_offsets[:count]
        self.schedule_removal(list(segments))

    def replace_segments(self, cleaned: LogSegment, old: Sequence[LogSegment]) -> bool:
        """Swap ``cleaned`` (files ``.cleaned``, fsynced, same base offset as ``old[0]``)
        in for the consecutive non-active segments ``old``, crash-safely as Kafka's
        replaceSegments: rename it ``.swap``, swap in memory, rename ``old`` ``.deleted``,
        drop the suffix; a crash between two renames is completed at load. False, and
        nothing changed, when ``old`` are no longer consecutive segments of this log."""
        i = next((n for n, s in enumerate(self._segments) if s is old[0]), -1)
        count = len(old)
        current = self._segments[i : i + count] if i >= 0 else []
        if len(current) != count or any(a is not b for a, b in zip(current, old, strict=True)):
            return False
        assert i + count < len(self._segments), "the active segment is never cleaned"
        cleaned.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
        self._segments[i : i + count] = [cleaned]
        self._base_offsets[i : i + count] = [cleaned.base_offset]
        self.schedule_removal(list(old))
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
            sync_dir(self.dir)

    def schedule_removal(self, segments: list[LogSegment]) -> None:
        """Rename the files to ``.deleted`` now, so the names are free for a new segment
        at once (a rename is a metadata update, as cheap as an append), and remove them
        in the executor after ``file.delete.delay.ms``, as Kafka does."""
        with self.maybe_handle_io_exception("Error while deleting segments"):
            paths = [path for segment in segments for path in segment.rename_to_deleted()]
        scheduler = self._scheduler
        job = self.guarded("Error while deleting segments", lambda: _remove_files(paths))

        def remove() -> None:
            scheduler.run_blocking_in_background(job, name="delete segments")

        scheduler.call_later(self.config.file_delete_delay_ms / 1000, remove)

    # -- flush and lifecycle -------------------------------------------------------------

    async def flush(self, from_offset: int, to_offset: int) -> None:
        """fsync, in the executor, the open segments holding offsets in
        [``from_offset``, ``to_offset``) and the directory (Kafka's LocalLog.flush)."""
        segments = [
            s for s in self.segments_from(from_offset) if s.base_offset < to_offset and not s.closed
        ]
        for segment in segments:
            segment.pin()
        try:
            with self.maybe_handle_io_exception(f"Error while flushing log up to {to_offset}"):
                await self._scheduler.run_blocking(_flush_segments, segments, self.dir)
        finally:
            for segment in segments:
                segment.unpin()

    def close(self) -> None:
        for segment in self._segments:
            segment.close()

    def delete(self) -> None:
        """Close the segments and remove the partition directory. It is renamed at
        once with Kafka's ``.<id>-delete`` suffix — a metadata update, so a topic
        recreated under the same name never meets the old files — then removed in the
        background."""
        self.close()
        self.deleted = True
        doomed = f"{self.dir}.{uuid.uuid4().hex}-delete"
        os.rename(self.dir, doomed)
        self._scheduler.run_blocking_in_background(
            shutil.rmtree, doomed, True, name=f"remove {os.path.basename(doomed)}"
        )


def _flush_segments(segments: list[LogSegment], directory: str) -> None:
    """*Blocking.* fsync ``segments`` and their directory. Pinned by the caller, so
    their descriptors stay open even if they are closed (deleted, truncated away)
    while this runs."""
    for segment in segments:
        segment.flush()
    # New segment files exist after a crash only once their directory entry is synced.
    sync_dir(directory)


def sync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_files(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
