"""LogSegment: one ``<base offset>.log`` file with its offset and time indexes.

The log file is a concatenation of RecordBatch v2 batches exactly as Kafka stores them
(see ``protocol.record_batch``); batches never straddle segments. The ``.index`` maps the
last offset of a batch to the batch's byte position, one entry per
``index.interval.bytes`` of log; the ``.timeindex`` maps the largest timestamp seen so
far to the last offset of the batch that carried it.

Contract: event-loop only, except the methods marked *blocking*, which the owning `LocalLog`
runs in an executor. Appends are ``os.writev`` into the page cache and reads are
``os.pread`` from it; fsync, scans and index rebuilds are the blocking part. A segment
the log cleaner writes (files named ``.cleaned``) belongs to its thread until the loop
swaps it into the log.

Invariants: ``size`` is the byte length of the complete batches in the file; every
index entry points at the start of a batch in ``[0, size)``; ``max_timestamp_so_far``
and ``offset_of_max_timestamp_so_far`` describe the batches in the file.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import KafkaStorageError
from tiercel.protocol.record_batch import (
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
    compute_crc,
    read_header,
)
from tiercel.storage.file_names import (
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    filename_prefix_from_offset,
)
from tiercel.storage.leader_epoch_cache import LeaderEpochFileCache
from tiercel.storage.log_values import AppendBatch, Buffer, LogOffsetMetadata
from tiercel.storage.offset_index import OffsetIndex
from tiercel.storage.time_index import TimeIndex
from tiercel.storage.transaction_index import AbortedTxn, TransactionIndex

_log: Final = logging.getLogger("tiercel.log")

# Headers are scanned in windows of this size: a handful of pread calls cover the
# distance between two sparse index entries.
_SCAN_WINDOW: Final = 16 * 1024
# Recovery reads the segment in chunks of this size.
_RECOVERY_CHUNK: Final = 8 * 1024 * 1024
_INT32_MAX: Final = 2**31 - 1
_IOV_MAX: Final = 1024


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """A batch found by scanning: where it starts and what its header says."""

    position: int
    header: RecordBatchHeader

    @property
    def size(self) -> int:
        return self.header.batch_length + LOG_OVERHEAD


class LogSegment:
    def __init__(
        self,
        directory: str,
        base_offset: int,
        index_interval_bytes: int,
        max_index_size: int,
        *,
        file_exists: bool = False,
        file_suffix: str = "",
    ) -> None:
        """Open (or create) the segment's files. Opening existing indexes reads them:
        *blocking* when ``file_exists``; creating a new segment is only a few opens.
        ``file_suffix`` (``.cleaned``) names the files of a segment the cleaner writes."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        prefix = os.path.join(directory, filename_prefix_from_offset(base_offset))
        self.log_path = prefix + LOG_FILE_SUFFIX + file_suffix
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(self.log_path, flags, 0o644)
        self.size = os.fstat(self.fd).st_size
        if not file_exists and self.size:
            # A brand-new segment: bytes left under this name are stale (Kafka's roll
            # deletes such a file first).
            os.ftruncate(self.fd, 0)
            self.size = 0
        self.index_files_existed = file_exists and all(
            os.path.exists(prefix + suffix + file_suffix)
            for suffix in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX)
        )
        self.offset_index = OffsetIndex(
            prefix + INDEX_FILE_SUFFIX + file_suffix, base_offset, max_index_size
        )
        self.time_index = TimeIndex(
            prefix + TIME_INDEX_FILE_SUFFIX + file_suffix, base_offset, max_index_size
        )
        # Kafka's TransactionIndex: no file until a transaction is aborted here.
        self.txn_index = TransactionIndex(
            prefix + TXN_INDEX_FILE_SUFFIX + file_suffix, base_offset, file_exists=file_exists
        )
        if not file_exists:
            # A brand-new segment: index files left under these names are stale.
            self.offset_index.truncate()
            self.time_index.truncate()
        self.created_ms = int(time.time() * 1000)
        self.rolling_based_timestamp: int | None = None
        self.bytes_since_last_index_entry = 0
        last = self.time_index.last_entry
        self.max_timestamp_so_far = last.timestamp
        self.offset_of_max_timestamp_so_far = last.offset
        self.closed = False
        self._pins = 0

    @property
    def fd(self) -> int:
        """The log file's descriptor; KafkaStorageError once the segment is closed (a
        reader that raced a deletion must fail, not read whatever reuses the number)."""
        if self._fd < 0:
            raise KafkaStorageError(f"{self.log_path} is closed")
        return self._fd

    # -- append ----------------------------------------------------------------------

    def append(self, batches: Sequence[AppendBatch]) -> None:
        """Write whole batches at the end of the file and index them; on failure the
        segment is as it was before (no orphan bytes whose offsets would be reused)."""
        before = (
            self.size,
            self.bytes_since_last_index_entry,
            self.max_timestamp_so_far,
            self.offset_of_max_timestamp_so_far,
            self.rolling_based_timestamp,
        )
        self._write_fully([chunk for batch in batches for chunk in batch.chunks])
        try:
            self._index_batches(batches)
        except Exception as e:
            (
                self.size,
                self.bytes_since_last_index_entry,
                self.max_timestamp_so_far,
                self.offset_of_max_timestamp_so_far,
                self.rolling_based_timestamp,
            ) = before
            os.ftruncate(self.fd, self.size)
            self.offset_index.truncate_to(batches[0].base_offset)
            self.time_index.truncate_to(batches[0].base_offset)
            raise KafkaStorageError(f"indexing an append to {self.log_path} failed: {e}") from e

    def _index_batches(self, batches: Sequence[AppendBatch]) -> None:
        # Kafka's rule: a batch gets an index entry once more than index.interval.bytes
        # were written since the previous entry.
        position = self.size
        for batch in batches:
            if batch.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = batch.max_timestamp
                self.offset_of_max_timestamp_so_far = batch.last_offset
            if self.rolling_based_timestamp is None:
                self.rolling_based_timestamp = batch.max_timestamp
            # The roll check runs before an append, not between its batches: an index
            # that fills up mid-append (or in a recovery under a smaller
            # segment.index.bytes) leaves the rest unindexed rather than failing after
            # the bytes were written.
            if self.bytes_since_last_index_entry > self.index_interval_bytes and not (
                self.offset_index.is_full or self.time_index.is_full
            ):
                self.offset_index.append(batch.last_offset, position)
                self.time_index.maybe_append(
                    self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
                )
                self.bytes_since_last_index_entry = 0
            position += batch.size
            self.bytes_since_last_index_entry += batch.size
        self.size = position

    def _write_fully(self, chunks: list[Buffer]) -> None:
        try:
            for start in range(0, len(chunks), _IOV_MAX):
                group = chunks[start : start + _IOV_MAX]
                expected = sum(len(chunk) for chunk in group)
                written = os.writev(self.fd, group)
                if written < expected:  # only on a full disk or a signal; finish or fail
                    rest = memoryview(b"".join(group))[written:]
                    while rest:
                        rest = rest[os.write(self.fd, rest) :]
        except OSError as e:
            # Never leave half a batch behind: cut back to the last complete batch so
            # the file stays a valid log, then fail the append.
            os.ftruncate(self.fd, self.size)
            raise KafkaStorageError(f"append to {self.log_path} failed: {e}") from e

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _INT32_MAX

    def should_roll(
        self,
        messages_size: int,
        max_timestamp: int,
        max_offset: int,
        segment_bytes: int,
        roll_ms: int,
        now_ms: int,
    ) -> bool:
        """Kafka's roll rule: full by bytes, too old, an index full, or offsets that no
        longer fit a 32-bit delta from the base offset."""
        if self.size > segment_bytes - messages_size:
            return True
        if self.size > 0 and self._time_waited_for_roll(now_ms, max_timestamp) > roll_ms:
            return True
        return (
            self.offset_index.is_full
            or self.time_index.is_full
            or not self.can_convert_to_relative_offset(max_offset)
        )

    def _time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        if self.rolling_based_timestamp is not None and self.rolling_based_timestamp >= 0:
            return message_timestamp - self.rolling_based_timestamp
        return now_ms - self.created_ms

    # -- read ------------------------------------------------------------------------

    def _headers_from(self, position: int, end: int) -> Iterator[BatchPosition]:
        """Batch headers from ``position`` up to ``end``, read in windows."""
        window = b""
        window_start = position
        while position + RECORD_BATCH_OVERHEAD <= end:
            offset_in_window = position - window_start
            if offset_in_window + RECORD_BATCH_OVERHEAD > len(window):
                window = os.pread(self.fd, min(_SCAN_WINDOW, end - position), position)
                window_start, offset_in_window = position, 0
                if len(window) < RECORD_BATCH_OVERHEAD:
                    return
            header = read_header(window, offset_in_window)
            batch = BatchPosition(position, header)
            yield batch
            position += batch.size

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset is >= ``offset``, or None past the end."""
        entry = self.offset_index.lookup(offset)
        start = max(entry.position, starting_position)
        for batch in self._headers_from(start, self.size):
            if batch.header.last_offset >= offset:
                return batch
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int,
        min_one_message: bool,
    ) -> tuple[LogOffsetMetadata, bytes] | None:
        """Bytes from the batch holding ``start_offset``, at most ``max_size`` of them
        (but the whole first batch when ``min_one_message``, KIP-74) and never past
        ``max_position``; none when that first batch is larger than ``max_size`` and
        not ``min_one_message``. None when the offset lies beyond this segment."""
        batch = self.translate_offset(start_offset)
        if batch is None:
            return None
        metadata = LogOffsetMetadata(start_offset, self.base_offset, batch.position)
        if not min_one_message and max_size < batch.size:
            # A fragment of the first batch holds no record a client can use (the Java
            # consumer and kafka-python fail the poll: "no complete records were
            # found"). Kafka's LogSegment.read flags such a read firstEntryIncomplete
            # and ReplicaManager.readFromLog (checkFetchDataInfo) answers it with no
            # records for every Fetch from v3 on; Tiercel serves only v4 and later.
            return metadata, b""
        limit = max(max_size, batch.size) if min_one_message else max_size
        fetch_size = min(max_position - batch.position, limit)
        if fetch_size <= 0:
            return metadata, b""
        return metadata, os.pread(self.fd, fetch_size, batch.position)

    def read_batch(self, batch: BatchPosition) -> bytes:
        return os.pread(self.fd, batch.size, batch.position)

    def batches_from(self, position: int = 0) -> Iterator[BatchPosition]:
        return self._headers_from(position, self.size)

    def next_offset(self) -> int:
        """One past the last offset in the segment (its base offset when empty)."""
        last = self.offset_index.lookup(2**63 - 1)
        next_offset = self.base_offset
        for batch in self._headers_from(last.position, self.size):
            next_offset = batch.header.last_offset + 1
        return next_offset

    def batches_by_timestamp(self, timestamp: int, starting_offset: int) -> Iterator[BatchPosition]:
        """In order, the batches at or after ``starting_offset`` whose max timestamp is
        >= ``timestamp``, from the time index's hint on: where a record with that
        timestamp may be (timestamps need not grow, so not only the first one)."""
        hint = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(hint.offset, starting_offset)).position
        for batch in self._headers_from(position, self.size):
            if (
                batch.header.last_offset >= starting_offset
                and batch.header.max_timestamp >= timestamp
            ):
                yield batch

    def largest_timestamp(self) -> int:
        """The segment's max timestamp, or its file's mtime when it has none (Kafka)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return int(os.fstat(self.fd).st_mtime * 1000)

    # -- truncation, recovery and lifecycle --------------------------------------------

    def update_txn_index(self, aborted: AbortedTxn) -> None:
        """Record a transaction whose ABORT marker was appended to this segment."""
        self.txn_index.append(aborted)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; bytes removed."""
        batch = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if batch is None:
            return 0
        removed = self.size - batch.position
        os.ftruncate(self.fd, batch.position)
        self.size = batch.position
        self.bytes_since_last_index_entry = 0
        if self.size == 0:
            self.created_ms = int(time.time() * 1000)
            self.rolling_based_timestamp = None
        self.load_largest_timestamp()
        return removed

    def load_largest_timestamp(self) -> None:
        """Max timestamp from the time index's last entry and the batches after it, and
        the timestamp that ``segment.ms`` counts from. Reads headers only."""
        for batch in self._headers_from(0, self.size):
            self.rolling_based_timestamp = batch.header.max_timestamp
            break
        last = self.time_index.last_entry
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = last.timestamp, last.offset
        start = self.offset_index.lookup(last.offset).position
        for batch in self._headers_from(start, self.size):
            if batch.header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = batch.header.max_timestamp
                self.offset_of_max_timestamp_so_far = batch.header.last_offset

    def recover(self, epoch_cache: LeaderEpochFileCache | None) -> int:
        """*Blocking.* Rebuild the indexes by scanning every batch with CRC checks and
        truncate anything after the last valid batch; returns the bytes truncated.

        Re-adds leader epochs found in the batches to the epoch cache, as Kafka's
        ``LogSegment.recover`` does, so an epoch whose checkpoint write was lost in a
        crash is restored from the data itself.

        The transaction index is emptied: the loader re-derives it by replaying the
        producer state over the recovered batches (Kafka's LogSegment.recover with its
        ProducerStateManager)."""
        self.offset_index.truncate()
        self.time_index.truncate()
        self.txn_index.reset()
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = self.base_offset
        self.bytes_since_last_index_entry = 0
        self.rolling_based_timestamp = None
        self.size = 0
        file_size = os.fstat(self.fd).st_size
        for batch, data in self._complete_batches(file_size):
            header = batch.header
            if header.magic != MAGIC_V2 or compute_crc(data, 0, batch.size) != header.crc:
                log_event(
                    _log,
                    logging.WARNING,
                    "corrupt_batch_found",
                    segment=self.log_path,
                    position=batch.position,
                    offset=header.base_offset,
                )
                break
            self._index_batches(
                [
                    AppendBatch(
                        (),
                        batch.size,
                        header.base_offset,
                        header.last_offset,
                        header.max_timestamp,
                        header.partition_leader_epoch,
                    )
                ]
            )
            epoch = header.partition_leader_epoch
            if (
                epoch_cache is not None
                and epoch >= 0
                and (epoch_cache.latest_epoch is None or epoch > epoch_cache.latest_epoch)
            ):
                epoch_cache.assign(epoch, header.base_offset)
        truncated = file_size - self.size
        if truncated:
            os.ftruncate(self.fd, self.size)
        return truncated

    def _complete_batches(self, file_size: int) -> Iterator[tuple[BatchPosition, memoryview]]:
        """Each complete batch of the file with its bytes, read in large chunks; stops at
        a torn tail or at a size field that cannot be right."""
        position = 0
        chunk = b""
        chunk_start = 0
        while position + RECORD_BATCH_OVERHEAD <= file_size:
            at = position - chunk_start
            if at + RECORD_BATCH_OVERHEAD > len(chunk):
                chunk = os.pread(self.fd, _RECOVERY_CHUNK, position)
                chunk_start, at = position, 0
            header = read_header(chunk, at)
            size = header.batch_length + LOG_OVERHEAD
            if size < RECORD_BATCH_OVERHEAD or position + size > file_size:
                return
            if at + size > len(chunk):
                chunk = os.pread(self.fd, max(size, _RECOVERY_CHUNK), position)
                chunk_start, at = position, 0
            with memoryview(chunk) as view:
                yield BatchPosition(position, header), view[at : at + size]
            position += size

    def flush(self) -> None:
        """*Blocking.* fsync the log and its indexes."""
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def pin(self) -> None:
        """Keep the file descriptors open while an executor thread uses them (a flush);
        a close requested meanwhile happens at the last `unpin`. Event-loop only."""
        self._pins += 1

    def unpin(self) -> None:
        self._pins -= 1
        if self._pins == 0 and self.closed:
            self._close_files()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._pins == 0:
                self._close_files()

    def _close_files(self) -> None:
        os.close(self._fd)
        # The number may be reused by another file at once: never touch it again.
        self._fd = -1
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the log file, then the indexes, from ``old_suffix`` to ``new_suffix``
        (the cleaner's ``.cleaned`` -> ``.swap`` -> final names); open descriptors stay
        valid. The log file goes first: at load a ``.log.swap`` decides a swap."""
        new_log_path = self.log_path.removesuffix(old_suffix) + new_suffix
        os.rename(self.log_path, new_log_path)
        self.log_path = new_log_path
        for index in (self.offset_index, self.time_index):
            index.rename_to(index.path.removesuffix(old_suffix) + new_suffix)
        self.txn_index.rename_to(self.txn_index.path.removesuffix(old_suffix) + new_suffix)

    def rename_to_deleted(self) -> list[str]:
        """Close the files and add the ``.deleted`` suffix, as Kafka does before
        removing a segment in the background; returns the new paths."""
        self.close()
        renamed = []
        for path, rename in (
            (self.log_path, lambda new: os.rename(self.log_path, new)),
            (self.offset_index.path, self.offset_index.rename_to),
            (self.time_index.path, self.time_index.rename_to),
            (self.txn_index.path, self.txn_index.rename_to),
        ):
            if os.path.exists(path):
                rename(path + DELETED_FILE_SUFFIX)
                renamed.append(path + DELETED_FILE_SUFFIX)
        return renamed

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"
