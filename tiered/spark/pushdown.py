"""Filter pushdown (PySpark 4.1's DataSourceReader.pushFilters): comparisons of
``partition``, ``offset`` and ``timestamp`` with literals, turned into bounds the
planner prunes with before any object is read.

The contract: a filter not handed back is one the source applies exactly. Partition
and offset filters are: the plan keeps only the partitions asked for and clips each
range to the offsets asked for, and the reader clips records to their range exactly.
``offset IN (...)`` only narrows the range to its smallest and largest value, and
timestamps only drop segments whose maximum timestamp is below the lower bound (records
are not in timestamp order), so those filters go back to Spark to apply.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

__all__ = ["PushedBounds", "push_filters"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MICROSECOND = datetime.timedelta(microseconds=1)


@dataclass(slots=True)
class PushedBounds:
    """The rows the pushed filters allow: partitions in ``partitions`` (None: any) from
    ``min_partition`` to ``max_partition``, offsets from ``min_offset`` to
    ``max_offset`` inclusive, timestamps (µs since the epoch) at or after
    ``min_timestamp_us``."""

    partitions: set[int] | None = None
    min_partition: int = 0
    max_partition: int = 2**31 - 1
    min_offset: int = 0
    max_offset: int | None = None
    min_timestamp_us: int | None = None
    pushed: list[str] = field(default_factory=list)  # for tests and explain: what was taken

    def allows_partition(self, partition: int) -> bool:
        if not self.min_partition <= partition <= self.max_partition:
            return False
        return self.partitions is None or partition in self.partitions

    def clip(self, first: int, last: int) -> tuple[int, int]:
        """Offsets ``first`` to ``last`` narrowed to the bounds (first > last: none)."""
        high = last if self.max_offset is None else min(last, self.max_offset)
        return max(first, self.min_offset), high

    def _at_most(self, offset: int) -> None:
        self.max_offset = offset if self.max_offset is None else min(self.max_offset, offset)

    def _only(self, partitions: Iterable[int]) -> None:
        wanted = set(partitions)
        self.partitions = wanted if self.partitions is None else self.partitions & wanted


def push_filters(bounds: PushedBounds, filters: Iterable[Filter]) -> Iterator[Filter]:
    """Narrow ``bounds`` by ``filters`` (ANDed); yield those Spark must still apply."""
    for one in filters:
        if not _push(bounds, one):
            yield one


def _push(bounds: PushedBounds, one: Filter) -> bool:
    """Narrow ``bounds`` by ``one``; True if that applies it exactly."""
    column = getattr(one, "attribute", None)
    if column == ("partition",) or column == ("offset",):
        return _push_integer(bounds, column[0], one)
    if column == ("timestamp",):
        _push_timestamp(bounds, one)
    return False


def _push_integer(bounds: PushedBounds, column: str, one: Filter) -> bool:
    values: tuple[Any, ...] = one.value if isinstance(one, In) else (getattr(one, "value", None),)
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return False
    if column == "partition":
        exact = _push_partition(bounds, one, values)
    else:
        exact = _push_offset(bounds, one, values)
    if exact:
        bounds.pushed.append(repr(one))
    return exact


def _push_partition(bounds: PushedBounds, one: Filter, values: tuple[int, ...]) -> bool:
    bound = values[0]
    if isinstance(one, EqualTo | In):
        bounds._only(values)
    elif isinstance(one, GreaterThan | GreaterThanOrEqual):
        low = bound + isinstance(one, GreaterThan)
        bounds.min_partition = max(bounds.min_partition, low)
    elif isinstance(one, LessThan | LessThanOrEqual):
        high = bound - isinstance(one, LessThan)
        bounds.max_partition = min(bounds.max_partition, high)
    else:
        return False
    return True


def _push_offset(bounds: PushedBounds, one: Filter, values: tuple[int, ...]) -> bool:
    bound = values[0]
    if isinstance(one, EqualTo):
        bounds.min_offset = max(bounds.min_offset, bound)
        bounds._at_most(bound)
    elif isinstance(one, GreaterThan | GreaterThanOrEqual):
        bounds.min_offset = max(bounds.min_offset, bound + isinstance(one, GreaterThan))
    elif isinstance(one, LessThan | LessThanOrEqual):
        bounds._at_most(bound - isinstance(one, LessThan))
    elif isinstance(one, In):
        bounds.min_offset = max(bounds.min_offset, min(values))
        bounds._at_most(max(values))
        return False  # the offsets between the values are still read
    else:
        return False
    return True


def _push_timestamp(bounds: PushedBounds, one: Filter) -> None:
    value = getattr(one, "value", None)
    if isinstance(one, In):
        stamps = [_microseconds(v) for v in one.value]
        low = None if None in stamps else min(s for s in stamps if s is not None)
    elif isinstance(one, EqualTo | GreaterThanOrEqual):
        low = _microseconds(value)
    elif isinstance(one, GreaterThan):
        micros = _microseconds(value)
        low = None if micros is None else micros + 1
    else:
        return
    if low is not None:
        current = bounds.min_timestamp_us
        bounds.min_timestamp_us = low if current is None else max(current, low)


def _microseconds(value: object) -> int | None:
    """A timestamp literal as µs since the epoch; None if not a zoned datetime."""
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        return None
    return (value - _EPOCH) // _MICROSECOND
