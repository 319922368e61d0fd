"""Cleaner: the blocking half of log compaction (Kafka's Cleaner), run in the log
cleaner's executor threads; `LogCleaner` chooses the work and swaps the result in on the
event loop.

A round over ``[first dirty, first uncleanable)`` takes two steps:

1. `map_segment`, for each dirty segment: key -> latest offset over the dirty section.
   When the map fills, the round ends at the last offset it holds (the rest stays dirty
   for the next round).
2. `clean_segments`, per group of segments: every batch through
   `CleaningRound.filter_batch` into one new segment named ``.cleaned``, fsynced.

What stays (Kafka's shouldRetainRecord and BatchRetention): a record past the map's
latest offset; else a keyed record at or after its key's offset in the map, when it has
a value or its batch has no delete horizon or the horizon is still ahead. A batch that
keeps everything and needs no new horizon is copied byte for byte; otherwise it is
rebuilt (`protocol.record_filter`), and a batch keeping a tombstone gets the delete
horizon ``now + delete.retention.ms`` on its first cleaning (KIP-534), so tombstones go
in a later round. A batch left with no records is dropped, except a producer's last
batch (the one holding the last data offset its producer state still has: the last
sequence must survive) and the batch ending the round, kept as an empty header.

Transactions: the batches of aborted transactions (`AbortedRanges`, from the
transaction indexes) put no key in the map, so they never shadow a committed value,
and keep no record. Control batches (transaction markers) are kept whole, and so are
the aborted transactions of the segments cleaned, copied into the new segment's
transaction index: Kafka drops a marker once its transaction's data is gone and
``delete.retention.ms`` has passed, which is not done here yet.

Every batch read is checked (magic, CRC) first: corruption fails the round rather than
being re-stamped with a fresh CRC.

Thread contract: any thread, blocking; each call works on descriptors of its own
(`SegmentSource`) and on a `LogSegment` no one else sees until it is swapped in.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.compression import decompress
from tiercel.protocol.errors import CorruptRecordError
from tiercel.protocol.record_batch import (
    MAGIC_V2,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    RecordBatchHeader,
    compute_crc,
    read_header,
)
from tiercel.protocol.record_filter import ScannedRecord, empty_batch, rebuild_batch, scan_records
from tiercel.storage.file_names import CLEANED_FILE_SUFFIX
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.log_values import AppendBatch, Buffer
from tiercel.storage.offset_map import OffsetMap
from tiercel.storage.transaction_index import AbortedTxn

__all__ = [
    "AbortedRanges",
    "CleaningRound",
    "LogCleaningAbortedError",
    "SegmentSource",
    "clean_segments",
    "discard_segment",
    "map_segment",
    "read_batches",
]

# Segments are read in chunks of this size (a larger batch is read whole) and the
# cleaned segment is written in appends of about this size.
_READ_CHUNK: Final = 1024 * 1024
_WRITE_CHUNK: Final = 1024 * 1024


class AbortedRanges:
    """Which transactional batches belong to an aborted transaction: a producer's
    batches from an aborted transaction's first offset to its marker. Immutable once
    built; safe to share with the round's thread."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for txn in aborted:
            self._ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))

    def contains(self, header: RecordBatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        offset = header.base_offset
        return any(
            first <= offset <= last for first, last in self._ranges.get(header.producer_id, ())
        )


class LogCleaningAbortedError(Exception):
    """The round was aborted (shutdown, or its partition deleted): not a failure."""


@dataclass(frozen=True, slots=True)
class SegmentSource:
    """A segment as a round reads it: a descriptor of its own (a dup, so that a close,
    rename or deletion on the loop does not disturb the read), the segment's size when
    the round began (a non-active segment does not grow) and its base offset."""

    base_offset: int
    fd: int
    size: int


def read_batches(
    source: SegmentSource, position: int, abort: threading.Event
) -> Iterator[tuple[RecordBatchHeader, memoryview]]:
    """Each batch from ``position`` to the source's size with its bytes, checked (magic,
    CRC); CorruptRecordError on a bad or torn batch, LogCleaningAbortedError once
    ``abort`` is set."""
    chunk = b""
    chunk_start = position
    while position < source.size:
        if abort.is_set():
            raise LogCleaningAbortedError
        at = position - chunk_start
        if at + RECORD_BATCH_OVERHEAD > len(chunk):
            chunk = os.pread(source.fd, _READ_CHUNK, position)
            chunk_start, at = position, 0
        header = read_header(chunk, at)
        size = header.size_in_bytes
        if size < RECORD_BATCH_OVERHEAD or position + size > source.size:
            raise CorruptRecordError(
                f"batch at position {position} of segment {source.base_offset} has size {size}"
            )
        if at + size > len(chunk):
            chunk = os.pread(source.fd, max(size, _READ_CHUNK), position)
            chunk_start, at = position, 0
        batch = memoryview(chunk)[at : at + size]
        if header.magic != MAGIC_V2 or compute_crc(batch, 0, size) != header.crc:
            raise CorruptRecordError(
                f"corrupt batch at offset {header.base_offset} of segment {source.base_offset}"
            )
        yield header, batch
        position += size


def _records(header: RecordBatchHeader, batch: memoryview) -> tuple[Buffer, list[ScannedRecord]]:
    section = batch[RECORDS_OFFSET:]
    data = decompress(header.compression, section) if header.compression else section
    return data, scan_records(data, header.records_count)


def map_segment(
    sources: Sequence[SegmentSource],
    position: int,
    start_offset: int,
    offset_map: OffsetMap,
    aborted: AbortedRanges,
    abort: threading.Event,
) -> bool:
    """Add the keys of the one segment in ``sources``, from ``position``, at offsets
    from ``start_offset`` on, but those of aborted transactions (Kafka's
    buildOffsetMapForSegment); True when the map filled up before its end
    (``latest_offset`` is then the last offset it holds)."""
    (source,) = sources
    for header, batch in read_batches(source, position, abort):
        if not header.is_control and not aborted.contains(header):
            base = header.base_offset
            for record in _records(header, batch)[1]:
                offset = base + record.offset_delta
                if record.key is not None and offset >= start_offset:
                    if offset_map.is_full:
                        return True
                    offset_map.put(record.key, offset)
        if header.last_offset >= start_offset:
            offset_map.update_latest_offset(header.last_offset)
    return False


@dataclass(frozen=True, slots=True)
class CleaningRound:
    """What one round decides with. ``upper_bound_offset`` is the round's first
    uncleanable offset; ``producer_last_offsets`` maps each active producer to its last
    data offset (Kafka's lastRecordsOfActiveProducers), copied from the producer state
    when the round began. Owned by the round's thread, like its map."""

    offset_map: OffsetMap
    now_ms: int
    delete_retention_ms: int
    upper_bound_offset: int
    producer_last_offsets: Mapping[int, int]
    aborted: AbortedRanges

    def filter_batch(self, header: RecordBatchHeader, batch: memoryview) -> Buffer | None:
        """What stays of a checked batch: ``batch`` itself, a rebuilt batch, an empty
        header, or None (see the module docstring)."""
        if header.is_control:
            return batch
        if not self.aborted.contains(header):
            kept = self._filter_records(header, batch)
            if kept is not None:
                return kept
        last_of_producer = (
            header.has_producer_id
            and self.producer_last_offsets.get(header.producer_id) == header.last_offset
        )
        if last_of_producer or header.next_offset == self.upper_bound_offset:
            return empty_batch(header)
        return None

    def _filter_records(self, header: RecordBatchHeader, batch: memoryview) -> Buffer | None:
        """The batch, rebuilt or whole, with the records it retains; None if none."""
        data, records = _records(header, batch)
        retained = [record for record in records if self._retains(header, record)]
        if not retained:
            return None
        needs_horizon = not header.has_delete_horizon and not all(
            record.has_value for record in retained
        )
        if len(retained) == len(records) and not needs_horizon:
            return batch
        if needs_horizon:
            horizon = self.now_ms + self.delete_retention_ms
        else:
            horizon = header.base_timestamp if header.has_delete_horizon else NO_TIMESTAMP
        return rebuild_batch(header, data, retained, horizon)

    def _retains(self, header: RecordBatchHeader, record: ScannedRecord) -> bool:
        offset = header.base_offset + record.offset_delta
        if offset > self.offset_map.latest_offset:
            return True
        if record.key is None or offset < self.offset_map.get(record.key):
            return False
        return (
            record.has_value or not header.has_delete_horizon or self.now_ms < header.base_timestamp
        )


def clean_segments(
    group: Sequence[SegmentSource],
    directory: str,
    cleaning: CleaningRound,
    index_interval_bytes: int,
    max_index_size: int,
    aborted_txns: Sequence[AbortedTxn],
    abort: threading.Event,
) -> LogSegment:
    """Clean ``group`` (consecutive segments) into one new segment at the first one's
    base offset, its files named ``.cleaned``, fsynced, with the last source's mtime
    (what segment.ms and time retention fall back on, as Kafka keeps it) and the
    group's ``aborted_txns`` (their markers all stay). On any failure the new files
    are removed."""
    cleaned = LogSegment(
        directory,
        group[0].base_offset,
        index_interval_bytes,
        max_index_size,
        file_suffix=CLEANED_FILE_SUFFIX,
    )
    try:
        for source in group:
            _clean_into(source, cleaned, cleaning, abort)
        for txn in aborted_txns:
            cleaned.update_txn_index(txn)
        cleaned.flush()
        mtime = os.fstat(group[-1].fd).st_mtime_ns
        os.utime(cleaned.log_path, ns=(mtime, mtime))
    except BaseException:
        discard_segment(cleaned)
        raise
    return cleaned


def _clean_into(
    source: SegmentSource, cleaned: LogSegment, cleaning: CleaningRound, abort: threading.Event
) -> None:
    pending: list[AppendBatch] = []
    pending_bytes = 0
    for header, batch in read_batches(source, 0, abort):
        kept = cleaning.filter_batch(header, batch)
        if kept is None:
            continue
        kept_header = header if kept is batch else read_header(kept)
        pending.append(
            AppendBatch(
                (kept,),
                len(kept),
                kept_header.base_offset,
                kept_header.last_offset,
                kept_header.max_timestamp,
                kept_header.partition_leader_epoch,
            )
        )
        pending_bytes += len(kept)
        if pending_bytes >= _WRITE_CHUNK:
            cleaned.append(pending)
            pending, pending_bytes = [], 0
    if pending:
        cleaned.append(pending)


def discard_segment(segment: LogSegment) -> None:
    """Close a cleaned segment that will not be swapped in and remove its files."""
    segment.close()
    paths = (
        segment.log_path,
        segment.offset_index.path,
        segment.time_index.path,
        segment.txn_index.path,
    )
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
