"""Timestamp bounds inside the broker tail. The remote time indexes resolve a timestamp
only among tiered records; when none of those is late enough and a broker is read too,
the bound falls in the tail, and the tail's one task applies it as Spark's Kafka source
would have resolved it through a ListOffsets by timestamp: the read starts at the first
record whose timestamp is at or after the starting timestamp and ends before the first
at or after the ending one (records are in offset order in a task, so the first such
record is the offset Kafka's fetchOffsetByTimestamp would have named)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["TailTimestampError", "clip_by_timestamps"]


class TailTimestampError(RuntimeError):
    """A timestamp bound that falls in the broker tail cannot be met."""


def clip_by_timestamps(
    batches: Iterable[pa.RecordBatch],
    start_timestamp: int | None,
    end_timestamp: int | None,
    fail_if_no_start: bool,
    where: str,
) -> Iterator[pa.RecordBatch]:
    """``batches`` (in offset order) from the first record at or after
    ``start_timestamp`` up to, not including, the first at or after ``end_timestamp``
    (ms; None: no bound). With ``fail_if_no_start`` (startingOffsetsByTimestampStrategy
    error), no record late enough to start at is an error naming ``where``."""
    started = start_timestamp is None
    for batch in batches:
        stamps = batch.column("timestamp").cast(pa.int64())
        end = len(batch) if end_timestamp is None else _first_at_or_after(stamps, end_timestamp)
        begin = 0
        if not started:
            assert start_timestamp is not None
            begin = _first_at_or_after(stamps, start_timestamp)
            if end < begin:
                raise TailTimestampError(
                    f"{where}: the ending timestamp {end_timestamp} comes at an offset "
                    f"before the starting timestamp {start_timestamp}"
                )
            if begin == len(batch):
                continue
            started = True
        if end < len(batch):
            if end > begin:
                yield batch.slice(begin, end - begin)
            return
        yield batch.slice(begin) if begin else batch
    if not started and fail_if_no_start:
        raise TailTimestampError(
            f"{where}: no record has a timestamp at or after {start_timestamp} "
            "(startingOffsetsByTimestampStrategy=latest starts such partitions at the "
            "latest offset)"
        )


def _first_at_or_after(stamps: pa.Array, timestamp: int) -> int:
    """The index of the first stamp at or after ``timestamp``, else ``len(stamps)``."""
    at = pc.index(pc.greater_equal(stamps, timestamp), True).as_py()
    return len(stamps) if at < 0 else int(at)
