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
batch and the batch ending the round, kept as an empty header. A producer's last batch
(Kafka's isBatchLastRecordOfProducer) is the one holding the last data offset its
producer state still has, so that its last sequence survives, or, when that state has
no data batch left (a new epoch began with a marker), its control batches of its
current epoch, so that its epoch survives for fencing.

Transactions (`cleaned_transactions`, Kafka's CleanedTransactionMetadata): the batches
of aborted transactions (`AbortedRanges`, from the transaction indexes) put no key in
the map, so they never shadow a committed value, and are dropped. A COMMIT/ABORT
marker whose transaction still has data batches, or had some dropped by this round, is
kept whole; the aborted transactions of the ABORT markers kept that way are the new
segment's transaction index (an aborted transaction whose data is all gone needs no
entry). A marker whose transaction has no data batch left is piggy-backed on the
tombstone rule: on the first round that finds it so, it is rebuilt with the delete
horizon ``now + delete.retention.ms`` (attribute bit 6, the horizon as baseTimestamp,
record timestamp deltas taken from it, as Kafka's MemoryRecordsBuilder writes it);
a round at or after the horizon drops it, or empties it when it is its producer's last
batch or ends the round. Removing a marker whose transaction's data a later record
shadows thus takes three rounds: the data goes, then the horizon is set, then the
marker goes.

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
from tiercel.storage.cleaned_transactions import CleanedTransactions
from tiercel.storage.file_names import CLEANED_FILE_SUFFIX
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.log_values import AppendBatch, Buffer
from tiercel.storage.offset_map import OffsetMap
from tiercel.storage.transaction_index import AbortedTxn

__all__ = [
    "AbortedRanges",
    "CleaningRound",
    "LastRecord",
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
class LastRecord:
    """An active producer's last data offset (None when its state holds no data batch)
    and epoch (Kafka's LastRecord). A value."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class CleaningRound:
    """What one round decides with. ``upper_bound_offset`` is the round's first
    uncleanable offset; ``producer_last_records`` maps each active producer to its
    `LastRecord` (Kafka's lastRecordsOfActiveProducers), copied from the producer state
    when the round began; ``transactions`` follows the transactions as the round walks
    its batches in order, all groups through. Owned by the round's thread, like its
    map."""

    offset_map: OffsetMap
    now_ms: int
    delete_retention_ms: int
    upper_bound_offset: int
    producer_last_records: Mapping[int, LastRecord]
    transactions: CleanedTransactions

    def filter_batch(self, header: RecordBatchHeader, batch: memoryview) -> Buffer | None:
        """What stays of a checked batch: ``batch`` itself, a rebuilt batch, an empty
        header, or None (see the module docstring). Every batch of the round goes
        through here once, in offset order."""
        if header.is_control:
            removable = self.transactions.on_control_batch(header, batch)
            # Kafka's discardBatchRecords for a control batch: removable and past its
            # horizon. Before that it is kept whole, given a horizon if it has none.
            discard = (
                removable and header.has_delete_horizon and header.base_timestamp <= self.now_ms
            )
            if not discard and header.records_count > 0:
                return self._keep_marker(header, batch, removable)
        elif not self.transactions.on_data_batch(header):
            kept = self._filter_records(header, batch)
            if kept is not None:
                return kept
        if self._last_of_producer(header) or header.next_offset == self.upper_bound_offset:
            return empty_batch(header)
        return None

    def _last_of_producer(self, header: RecordBatchHeader) -> bool:
        """Whether the batch keeps its producer's last sequence or, with no data batch
        left in its state, its epoch (see the module docstring)."""
        if not header.has_producer_id:
            return False
        last = self.producer_last_records.get(header.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return header.last_offset == last.last_data_offset
        return header.is_control and header.producer_epoch == last.producer_epoch

    def _keep_marker(self, header: RecordBatchHeader, batch: memoryview, removable: bool) -> Buffer:
        """A control batch with all its records: as it is, or rebuilt with the delete
        horizon ``now + delete.retention.ms`` when it became removable without one
        (Kafka's filterTo with containsMarkerForEmptyTxn)."""
        if not removable or header.has_delete_horizon:
            return batch
        data, records = _records(header, batch)
        return rebuild_batch(header, data, records, self.now_ms + self.delete_retention_ms)

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
    abort: threading.Event,
) -> LogSegment:
    """Clean ``group`` (consecutive segments) into one new segment at the first one's
    base offset, its files named ``.cleaned``, fsynced, with the last source's mtime
    (what segment.ms and time retention fall back on, as Kafka keeps it) and, as its
    transaction index, the aborted transactions whose ABORT markers the group kept
    for the data the round dropped (`CleanedTransactions.take_retained_aborted`). On
    any failure the new files are removed."""
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
        for txn in cleaning.transactions.take_retained_aborted():
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
