"""Timestamp bounds the tier cannot resolve, applied in the broker tail's task: the
read starts at the first record at or after the starting timestamp and stops before
the first at or after the ending one, across Arrow batch boundaries, with timestamps
out of order as producers may set them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tiercel.tiered.reader import kafka_source_schema
from tiercel.tiered.spark.tail_timestamps import TailTimestampError, clip_by_timestamps

# offset -> timestamp, in batches of 4; not monotonic (a producer's CreateTime).
STAMPS = [10, 30, 20, 40, 50, 45, 70, 60, 80, 90, 85, 100]


def batches() -> list[pa.RecordBatch]:
    schema = kafka_source_schema(False)
    out = []
    for first in range(0, len(STAMPS), 4):
        n = min(4, len(STAMPS) - first)
        out.append(
            pa.record_batch(
                [
                    pa.array([None] * n, pa.binary()),
                    pa.array([b"v%d" % o for o in range(first, first + n)]),
                    pa.array(["t"] * n),
                    pa.array([0] * n, pa.int32()),
                    pa.array(range(first, first + n), pa.int64()),
                    pa.array(STAMPS[first : first + n], pa.timestamp("ms", tz="UTC")),
                    pa.array([0] * n, pa.int32()),
                ],
                schema=schema,
            )
        )
    return out


def offsets(start: int | None, end: int | None, fail: bool = True) -> list[int]:
    clipped = clip_by_timestamps(batches(), start, end, fail, "t-0 (broker tail)")
    return [o for b in clipped for o in b.column("offset").to_pylist()]


def first_at_or_after(timestamp: int) -> int | None:
    return next((o for o, t in enumerate(STAMPS) if t >= timestamp), None)


def brute_force(start: int | None, end: int | None) -> list[int]:
    """Kafka's answer: the first offset at or after each timestamp, then the range."""
    first = 0 if start is None else first_at_or_after(start)
    last = len(STAMPS) if end is None else first_at_or_after(end)
    return [] if first is None else list(range(first, len(STAMPS) if last is None else last))


@pytest.mark.parametrize("start", [None, 5, 10, 25, 41, 55, 61, 95, 100])
@pytest.mark.parametrize("end", [None, 31, 46, 75, 81, 100, 101])
def test_bounds_cut_at_the_first_record_at_or_after_them(
    start: int | None, end: int | None
) -> None:
    first = None if start is None else first_at_or_after(start)
    last = None if end is None else first_at_or_after(end)
    if first is not None and last is not None and first > last:
        with pytest.raises(TailTimestampError, match="comes at an offset before"):
            offsets(start, end)
        return
    assert offsets(start, end) == brute_force(start, end)


def test_no_record_late_enough_to_start_is_an_error_or_nothing() -> None:
    with pytest.raises(
        TailTimestampError, match=r"t-0 .*no record has a timestamp at or after 101"
    ):
        offsets(101, None)
    assert offsets(101, None, fail=False) == []
