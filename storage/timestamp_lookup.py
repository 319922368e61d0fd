"""Finding records by timestamp in a log's segments (Kafka's fetchOffsetByTimestamp):
ListOffsets by time, and KIP-734's largest timestamp.

The time index narrows a lookup to one batch (`LogSegment.batches_by_timestamp`), whose
records are decoded off the loop (`first_record_at_or_after`, pure: it may decompress).
The searches themselves are event-loop only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tiercel.protocol.compression import decompress
from tiercel.protocol.record_batch import RECORDS_OFFSET, TimestampType, read_header
from tiercel.protocol.records import decode_records
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.scheduler import Scheduler


def first_record_at_or_after(batch: bytes, target: int, min_offset: int) -> tuple[int, int] | None:
    """(timestamp, offset) of the batch's first record at or after ``min_offset`` whose
    timestamp is >= ``target``. Pure; runs in the executor."""
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


async def offset_by_timestamp(
    segments: Sequence[LogSegment],
    target: int,
    log_start_offset: int,
    scheduler: Scheduler,
    check_not_deleted: Callable[[], None],
) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record at or after ``log_start_offset`` with
    timestamp >= ``target``. ``segments`` is a copy: retention may change the log's
    list meanwhile; ``check_not_deleted`` raises once the log is gone."""
    for segment in segments:
        if segment.closed or segment.largest_timestamp() < target:
            continue
        for batch in segment.batches_by_timestamp(target, log_start_offset):
            data = segment.read_batch(batch)
            found = await scheduler.run_blocking(
                first_record_at_or_after, data, target, log_start_offset
            )
            check_not_deleted()
            if found is not None:
                return found
            if segment.closed or segment.size < batch.position + batch.size:
                break  # deleted or truncated while we decoded: the rest is gone
    return None


async def max_timestamp_and_offset(
    segments: Sequence[LogSegment], log_start_offset: int, scheduler: Scheduler
) -> tuple[int, int] | None:
    """(timestamp, offset) of the record carrying the largest timestamp."""
    best: LogSegment | None = None
    for segment in segments:
        if best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far:
            best = segment
    if best is None or best.max_timestamp_so_far < 0:
        return None
    batch = best.translate_offset(best.offset_of_max_timestamp_so_far)
    if batch is None:
        return None
    data = best.read_batch(batch)
    return await scheduler.run_blocking(
        first_record_at_or_after, data, best.max_timestamp_so_far, log_start_offset
    )
