"""Offsets by timestamp from the remote tier alone: the earliest offset whose record
timestamp is at or after a given one, as the broker answers a ListOffsets by timestamp
(Kafka's UnifiedLog.fetchOffsetByTimestamp, and RemoteLogManager.findOffsetByTimestamp
for remote segments) and as Spark's Kafka source resolves startingTimestamp and the rest.

Segments are taken in offset order; one whose maximum timestamp (in its metadata) is
below the target holds no such record and is skipped unread. In the first one that may,
its ``.timeindex`` object (12-byte entries: timestamp, 8 bytes, and offset relative to
the segment's base, 4 bytes, as Kafka's TimeIndex) gives where to start: every record
up to the offset of the last entry whose timestamp is below the target has a timestamp
below it (an entry is the largest timestamp so far), so the scan starts there and reads
batches until a record reaches the target. Blocking; any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Generator, Sequence
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from tiercel.tiered.reader import SegmentRange, read_segment_range
from tiercel.tiered.rsm.object_layout import object_key
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.remote_storage_manager import IndexType, RemoteResourceNotFoundError

__all__ = ["offset_for_timestamp", "time_index_start"]

_TIME_INDEX_ENTRY: Final = struct.Struct(">qi")
_SCAN_BATCH_BYTES: Final = 256 * 1024  # Arrow batches while scanning: stop early


def time_index_start(store: ObjectStore, segment_range: SegmentRange, timestamp: int) -> int:
    """The offset of ``segment_range`` to scan from for the first record at or after
    ``timestamp``: past every index entry whose timestamp is below it."""
    segment = segment_range.segment
    try:
        index = store.get(object_key(segment, IndexType.TIMESTAMP.value))
    except RemoteResourceNotFoundError:
        return segment_range.first_offset
    start = segment_range.first_offset
    previous = -1
    usable = len(index) // _TIME_INDEX_ENTRY.size * _TIME_INDEX_ENTRY.size
    for stamp, relative in _TIME_INDEX_ENTRY.iter_unpack(index[:usable]):
        if relative <= previous:
            break  # the zeroed tail of an index not trimmed
        previous = relative
        if stamp >= timestamp:
            break
        start = max(start, segment.start_offset + relative)
    return start


def offset_for_timestamp(
    store: ObjectStore, ranges: Sequence[SegmentRange], timestamp: int
) -> int | None:
    """The first offset of ``ranges`` (in offset order) whose record's timestamp is at
    or after ``timestamp`` (ms), None if there is none."""
    for segment_range in ranges:
        if segment_range.segment.max_timestamp_ms < timestamp:
            continue
        start = time_index_start(store, segment_range, timestamp)
        if start > segment_range.last_offset:
            continue
        scan = SegmentRange(segment_range.segment, start, segment_range.last_offset)
        reads: Generator[pa.RecordBatch, None, None] = read_segment_range(
            store, scan, batch_bytes=_SCAN_BATCH_BYTES
        )  # type: ignore[assignment]
        try:
            for batch in reads:
                stamps = batch.column("timestamp").cast("int64")
                at = pc.index(pc.greater_equal(stamps, timestamp), True).as_py()
                if at >= 0:
                    return int(batch.column("offset")[at].as_py())
        finally:
            reads.close()
    return None
