"""The input partitions of a tiercel read (what one Spark task reads) and how
``minPartitions`` cuts a partition's planned ranges into several.

Two kinds, kept apart because they read from different places: a `TierSlice` holds
segment ranges of one topic partition, read from the object store; a `BrokerTailSlice`
holds the offsets past the tier's end, read from a broker. Both are small and picklable:
the store's root and options, offsets, and the segments' metadata — no bytes.

Without ``minPartitions`` each topic partition is one slice, as Spark's Kafka source
makes one task per topic partition. With it, as the Kafka source's
KafkaOffsetRangeCalculator, each topic partition gets a share of ``minPartitions``
proportional to its size (rounded up, so there are at least ``minPartitions`` slices
when there are that many offsets), cut into contiguous offset ranges of about equal
bytes. A range's bytes are estimated from its segment's size, in proportion to the
offsets of the segment it covers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from tiercel.tiered.reader import SegmentRange, open_object_root
from tiercel.tiered.rsm.object_store import ObjectStore

__all__ = [
    "BrokerTailSlice",
    "StoreRoot",
    "TierSlice",
    "estimated_bytes",
    "split_ranges",
]


@dataclass(frozen=True, slots=True)
class StoreRoot:
    """Where the remote tier is: ``path`` and the S3 options."""

    path: str
    endpoint_url: str | None = None
    region: str | None = None

    def open(self) -> ObjectStore:
        """The store, one per root in a process: a Python worker runs many tasks and an
        S3 client is worth keeping."""
        return _open(self.path, self.endpoint_url, self.region)


@functools.lru_cache(maxsize=8)
def _open(path: str, endpoint_url: str | None, region: str | None) -> ObjectStore:
    return open_object_root(path, endpoint_url, region)


@dataclass(frozen=True)
class TierSlice(InputPartition):
    """Ranges of one topic partition, in offset order, read from the tier."""

    root: StoreRoot
    topic: str
    partition: int
    ranges: tuple[SegmentRange, ...]
    include_headers: bool


@dataclass(frozen=True)
class BrokerTailSlice(InputPartition):
    """Offsets ``first_offset`` to ``last_offset`` (inclusive) of a topic partition not
    yet tiered, read from the brokers at ``bootstrap_servers``."""

    bootstrap_servers: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    include_headers: bool


def estimated_bytes(segment_range: SegmentRange) -> float:
    segment = segment_range.segment
    offsets = segment.end_offset - segment.start_offset + 1
    wanted = segment_range.last_offset - segment_range.first_offset + 1
    return segment.segment_size_in_bytes * wanted / offsets


def split_ranges(
    per_partition: Sequence[Sequence[SegmentRange]], min_partitions: int | None
) -> list[list[SegmentRange]]:
    """The ranges of each topic partition (``per_partition``, none empty) grouped into
    slices: one per topic partition, or at least ``min_partitions`` (see the module
    docstring)."""
    if min_partitions is None or min_partitions <= len(per_partition):
        return [list(ranges) for ranges in per_partition]
    sizes = [sum(estimated_bytes(r) for r in ranges) for ranges in per_partition]
    total = sum(sizes)
    slices: list[list[SegmentRange]] = []
    for ranges, size in zip(per_partition, sizes, strict=True):
        offsets = sum(r.last_offset - r.first_offset + 1 for r in ranges)
        share = math.ceil(min_partitions * size / total) if total > 0 else 1
        slices.extend(_cut(ranges, size, min(max(share, 1), offsets)))
    return slices


def _cut(ranges: Sequence[SegmentRange], size: float, parts: int) -> list[list[SegmentRange]]:
    """``ranges`` cut at offsets into ``parts`` pieces of about ``size / parts`` bytes."""
    cuts = []  # offsets that start a new piece
    done = 0.0
    targets = iter(size * j / parts for j in range(1, parts))
    target = next(targets, None)
    for r in ranges:
        bytes_ = estimated_bytes(r)
        count = r.last_offset - r.first_offset + 1
        while target is not None and done + bytes_ > target:
            cuts.append(r.first_offset + int((target - done) / bytes_ * count))
            target = next(targets, None)
        done += bytes_
    # Where rounding put two cuts on one offset, or a cut at the first offset, move them
    # on so that every piece keeps an offset.
    offsets = [o for r in ranges for o in (r.first_offset, r.last_offset)]
    lowest, highest = offsets[0], offsets[-1]
    fixed: list[int] = []
    for cut in cuts:
        cut = max(cut, fixed[-1] + 1 if fixed else lowest + 1)
        if cut <= highest:
            fixed.append(cut)
    pieces: list[list[SegmentRange]] = [[]]
    pending = list(fixed)
    for r in ranges:
        first = r.first_offset
        while pending and pending[0] <= r.last_offset:
            cut = pending.pop(0)
            if cut > first:
                pieces[-1].append(SegmentRange(r.segment, first, cut - 1))
            pieces.append([])
            first = max(cut, first)
        pieces[-1].append(SegmentRange(r.segment, first, r.last_offset))
    return [piece for piece in pieces if piece]
