"""A planned range of one remote segment, read by ranged GETs and decoded into Arrow.

The segment's ``.index`` object (the offset index: 8-byte entries, 4-byte offset
relative to the segment's base and 4-byte position, each keyed by a batch's last
offset, as Kafka's OffsetIndex) gives the position of the last batch ending at or
below the first wanted offset, so the read starts there, not at the segment's start
(Kafka's RemoteLogManager.read does the same through RemoteIndexCache.lookupOffset),
and the entry after the first one past the last wanted offset bounds the end. The
``.log`` object is read in large sequential ranges between the two. Each batch is
checked, decompressed and decoded into columns clipped to the range by
`record_batches`, the step shared with the broker tail; batches are views of the ranged
reads, not copies, and an Arrow batch is handed out whenever the decoded records fill
``batch_bytes`` (`record_batches.ArrowBatcher`). With the aborted transactions of a
read_committed read (`read_committed`), a transactional batch of an aborted transaction
is skipped whole before it is decompressed. An object shorter than its manifest says is
an error, as is a missing one.

Blocking; any thread (the store's contract); one call per range, which fetches the next
range of bytes in a helper thread of its own while it decodes the current one.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import pyarrow as pa

from tiercel.protocol.record_batch import read_header
from tiercel.tiered.reader.read_committed import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    AbortedTransactions,
    IsolationLevel,
    aborted_transactions,
    tier_last_stable_offset,
)
from tiercel.tiered.reader.record_batches import (
    DEFAULT_BATCH_BYTES,
    ArrowBatcher,
    CorruptBatchError,
    whole_batches,
)
from tiercel.tiered.reader.scan_plan import PartitionPlan, RemoteTierError, SegmentRange
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.remote_storage_manager import RemoteResourceNotFoundError

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_READ_BYTES",
    "byte_range",
    "committed_ranges",
    "read_partition",
    "read_segment_range",
]

DEFAULT_READ_BYTES: Final = 8 * 1024 * 1024  # one ranged GET
_INDEX_ENTRY: Final = struct.Struct(">ii")


def byte_range(store: ObjectStore, segment_range: SegmentRange) -> tuple[int, int]:
    """The bytes of the segment holding ``segment_range``'s offsets, by its offset index:
    from the batch at the last entry at or below the first offset, up to the end of the
    batch at the first entry past the last offset (the start of the entry after it),
    or the segment's end. Without an index, the whole segment."""
    size = segment_range.segment.segment_size_in_bytes
    try:
        index = store.get(segment_range.offset_index_key)
    except RemoteResourceNotFoundError:
        return 0, size
    relative: list[int] = []
    positions: list[int] = []
    for offset, position in _INDEX_ENTRY.iter_unpack(index[: len(index) // 8 * 8]):
        if relative and offset <= relative[-1]:
            break  # the unused, zeroed tail of an index file not trimmed
        relative.append(offset)
        positions.append(position)
    base = segment_range.segment.start_offset
    first = bisect.bisect_right(relative, segment_range.first_offset - base) - 1
    past = bisect.bisect_right(relative, segment_range.last_offset - base) + 1
    start = positions[first] if first >= 0 else 0
    return start, positions[past] if past < len(positions) else size


def read_segment_range(
    store: ObjectStore,
    segment_range: SegmentRange,
    include_headers: bool = False,
    read_bytes: int = DEFAULT_READ_BYTES,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    aborted: AbortedTransactions | None = None,
) -> Iterator[pa.RecordBatch]:
    """The records of ``segment_range`` as Arrow batches of Spark's Kafka-source schema
    (`record_columns.kafka_source_schema`), without the batches of ``aborted``
    transactions when given (read_committed); RemoteTierError naming the object and the
    position for a corrupt batch."""
    segment = segment_range.segment
    tp = segment.remote_log_segment_id.topic_partition
    key = segment_range.log_key
    first, last = segment_range.first_offset, segment_range.last_offset
    batcher = ArrowBatcher(tp.topic, tp.partition, include_headers, batch_bytes)
    start, end = byte_range(store, segment_range)
    for position, batch in _batches(store, key, start, end, read_bytes):
        header = read_header(batch)
        if header.base_offset > last:
            break
        if header.last_offset < first:
            continue
        if aborted is not None and aborted.drops(header):
            continue
        try:
            yield from batcher.append(batch, header, first, last)
        except CorruptBatchError as e:
            where = f"{key} at position {position} (offset {header.base_offset})"
            raise RemoteTierError(f"{where}: {e}") from e
    yield from batcher.flush()


def _batches(
    store: ObjectStore, key: str, start: int, end: int, read_bytes: int
) -> Iterator[tuple[int, memoryview]]:
    """(position, bytes) of each whole batch of object ``key`` from ``start`` to
    ``end``; the bytes a view of the ranged reads."""
    buffer = b""
    position = start  # of buffer[0] in the object
    for chunk in _chunks(store, key, start, end, read_bytes):
        buffer += chunk
        view = memoryview(buffer)
        used = 0
        try:
            for at, size in whole_batches(buffer):
                yield position + at, view[at : at + size]
                used = at + size
        except CorruptBatchError as e:
            raise RemoteTierError(f"{key} at position {position + used}: {e}") from e
        buffer, position = buffer[used:], position + used
    if buffer:
        raise RemoteTierError(f"{key}: truncated record batch at position {position}")


def _chunks(store: ObjectStore, key: str, start: int, end: int, read_bytes: int) -> Iterator[bytes]:
    """Bytes ``start`` to ``end`` of ``key`` in ranged GETs of ``read_bytes``, the next
    one fetched by a helper thread while the caller decodes this one."""
    ranges = [(begin, min(begin + read_bytes, end)) for begin in range(start, end, read_bytes)]
    if len(ranges) <= 1:
        yield from (_get_range(store, key, *r) for r in ranges)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="tiercel-reader-prefetch") as prefetch:
        pending = [prefetch.submit(_get_range, store, key, *r) for r in ranges[:1]]
        for following in [*ranges[1:], None]:
            chunk = pending.pop().result()
            if following is not None:
                pending.append(prefetch.submit(_get_range, store, key, *following))
            yield chunk


def _get_range(store: ObjectStore, key: str, begin: int, end: int) -> bytes:
    try:
        chunk = store.get_range(key, begin, end - 1)
    except RemoteResourceNotFoundError as e:
        # Deleted since planning (retention, or an expired off-lineage upload).
        raise RemoteTierError(f"{key}: the segment object is missing ({e})") from e
    if len(chunk) < end - begin:
        raise RemoteTierError(
            f"{key} ends at byte {begin + len(chunk)}, before the {end} its manifest and "
            "offset index promise (a truncated object)"
        )
    return chunk


def read_partition(
    store: ObjectStore,
    plan: PartitionPlan,
    include_headers: bool = False,
    isolation_level: IsolationLevel = READ_UNCOMMITTED,
) -> Iterator[pa.RecordBatch]:
    """Every range of ``plan`` in offset order (its gaps are the caller's to judge).
    read_committed: without aborted transactions' records, and only up to the tier's
    last stable offset (`read_committed`)."""
    if isolation_level != READ_COMMITTED:
        for segment_range in plan.ranges:
            yield from read_segment_range(store, segment_range, include_headers)
        return
    aborted = aborted_transactions(store, plan)
    for segment_range in committed_ranges(plan, tier_last_stable_offset(store, plan)):
        yield from read_segment_range(store, segment_range, include_headers, aborted=aborted)


def committed_ranges(plan: PartitionPlan, last_stable_offset: int | None) -> list[SegmentRange]:
    """``plan``'s ranges below ``last_stable_offset`` (all of them when None)."""
    if last_stable_offset is None:
        return list(plan.ranges)
    return [
        SegmentRange(r.segment, r.first_offset, min(r.last_offset, last_stable_offset - 1))
        for r in plan.ranges
        if r.first_offset < last_stable_offset
    ]
