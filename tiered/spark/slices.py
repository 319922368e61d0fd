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
import itertools
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
    aborted: tuple[tuple[int, int, int], ...] | None = None
    """read_committed: (producer id, first offset, marker offset) of the partition's
    aborted transactions, from the tier's ``.txnindex`` objects; None: read_uncommitted."""


@dataclass(frozen=True)
class BrokerTailSlice(InputPartition):
    """Offsets ``first_offset`` to ``last_offset`` (inclusive) of a topic partition not
    yet tiered, read from the brokers at ``bootstrap_servers``; from the first record at
    or after ``start_timestamp`` and before the first at or after ``end_timestamp`` when
    those fell in the tail (`tail_timestamps`)."""

    bootstrap_servers: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    include_headers: bool
    start_timestamp: int | None = None
    end_timestamp: int | None = None
    fail_if_no_start: bool = True
    read_committed: bool = False


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
    """``ranges`` cut into ``parts`` pieces of about ``size / parts`` bytes (at most one
    per offset). Cuts are placed by rank, the offset's position among the offsets of
    ``ranges`` (which may skip some), so a piece never starts in a hole between ranges."""
    counts = [r.last_offset - r.first_offset + 1 for r in ranges]
    total = sum(counts)
    parts = min(parts, total)
    cuts: set[int] = set()  # ranks that start a new piece
    done, rank = 0.0, 0
    targets = [size * j / parts for j in range(1, parts)]
    for r, count in zip(ranges, counts, strict=True):
        bytes_ = estimated_bytes(r)
        while targets and done + bytes_ > targets[0]:
            cuts.add(rank + int((targets.pop(0) - done) / bytes_ * count))
        done += bytes_
        rank += count
    cuts.discard(0)
    # Byte estimates can put two cuts on one offset; split the longest pieces until
    # there are ``parts``, so that minPartitions holds whenever there are the offsets.
    bounds = sorted(cuts | {0, total})
    while len(bounds) - 1 < parts:
        _, at = max((b - a, i) for i, (a, b) in enumerate(itertools.pairwise(bounds)))
        bounds.insert(at + 1, (bounds[at] + bounds[at + 1]) // 2)
    pieces: list[list[SegmentRange]] = [[] for _ in bounds[1:]]
    rank = 0
    for r, count in zip(ranges, counts, strict=True):
        for i, (a, b) in enumerate(itertools.pairwise(bounds)):
            lo, hi = max(a, rank), min(b, rank + count)
            if lo < hi:
                first = r.first_offset + lo - rank
                pieces[i].append(SegmentRange(r.segment, first, first + hi - lo - 1))
        rank += count
    return pieces
