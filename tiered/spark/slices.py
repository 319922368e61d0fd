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
offsets of the segment it covers. ``maxRecordsPerPartition`` (Spark 4, SPARK-49259)
first cuts each topic partition into as few contiguous pieces of about equal offsets as
hold at most that many each, as Spark's calculator does before it applies
``minPartitions`` to the pieces; a broker-tail slice is cut the same way
(`split_offsets`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from tiercel.tiered.reader import SegmentRange, open_object_root
from tiercel.tiered.reader.client_security import PLAINTEXT, ClientSecurity
from tiercel.tiered.rsm.object_store import ObjectStore

__all__ = [
    "BrokerTailSlice",
    "StoreRoot",
    "TierSlice",
    "estimated_bytes",
    "split_offsets",
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
    security: ClientSecurity = PLAINTEXT
    """How to connect: TLS and SASL settings from ``kafka.*`` options (`client_security`)."""


def estimated_bytes(segment_range: SegmentRange) -> float:
    segment = segment_range.segment
    offsets = segment.end_offset - segment.start_offset + 1
    wanted = segment_range.last_offset - segment_range.first_offset + 1
    return segment.segment_size_in_bytes * wanted / offsets


def split_offsets(first: int, last: int, max_records: int | None) -> list[tuple[int, int]]:
    """Offsets ``first`` to ``last`` as the fewest contiguous (first, last) pieces of
    about equal size holding at most ``max_records`` each (one piece without it)."""
    total = last - first + 1
    if max_records is None or total <= max_records:
        return [(first, last)]
    parts = math.ceil(total / max_records)
    bounds = [first + total * j // parts for j in range(parts + 1)]
    return [(a, b - 1) for a, b in itertools.pairwise(bounds)]


def split_ranges(
    per_partition: Sequence[Sequence[SegmentRange]],
    min_partitions: int | None,
    max_records: int | None = None,
) -> list[list[SegmentRange]]:
    """The ranges of each topic partition (``per_partition``, none empty) grouped into
    slices: one per topic partition, or pieces of at most ``max_records`` offsets, then
    at least ``min_partitions`` of them (see the module docstring)."""
    if max_records is not None:
        per_partition = [
            piece for ranges in per_partition for piece in _cut_offsets(ranges, max_records)
        ]
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


def _cut_offsets(ranges: Sequence[SegmentRange], max_records: int) -> list[list[SegmentRange]]:
    """``ranges`` cut into the fewest pieces of about equal offsets holding at most
    ``max_records`` each."""
    counts = [r.last_offset - r.first_offset + 1 for r in ranges]
    bounds = [b + 1 for _, b in split_offsets(0, sum(counts) - 1, max_records)]
    return _pieces(ranges, counts, [0, *bounds])


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
    return _pieces(ranges, counts, bounds)


def _pieces(
    ranges: Sequence[SegmentRange], counts: Sequence[int], bounds: Sequence[int]
) -> list[list[SegmentRange]]:
    """``ranges`` (``counts`` offsets each) cut at ``bounds``, ranks among their offsets
    from 0 to their total: one piece between each two."""
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
