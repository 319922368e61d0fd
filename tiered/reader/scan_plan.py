"""Which remote segment objects to read, for which offsets, planned from an object-store
listing alone (no broker, no ``__remote_log_metadata``).

After leader changes and unclean elections the remote tier can hold overlapping uploads
of the same offsets, and uploads of a lineage that was later truncated (KIP-405's
scenarios 3 to 5). A consumer of the broker reads the leader's lineage: its leader-epoch
cache, against which the broker's remote reader stops a segment where it leaves the
lineage (`RemoteLogReader.read`, Kafka's RemoteLogManager.read). The plan follows the same
rule:

1. Only complete uploads count (their ``manifest.json`` is there); incomplete ones are
   ignored.
2. The **winning lineage** is the leader-epoch checkpoint (the ``.leader-epoch-checkpoint``
   object: every epoch entry up to the segment's end, as Kafka uploads it) of the upload
   reaching the highest (leader epoch, end offset): the latest leader's view of the log.
3. Every upload (the winner included) is read from its start offset up to
   `lineage_end_offset` against that lineage: only when its first records are the
   lineage's (its epoch at its start offset is the lineage's epoch at that offset, as
   Kafka's isRemoteSegmentWithinLeaderEpochs requires of a segment's first epoch), and
   only up to where its epochs leave the lineage. By KIP-101 a record is the one its
   epoch wrote at its offset, so those records are exactly the ones the broker serves.
4. Where usable uploads overlap, each offset is read once, from the newer upload (higher
   leader epoch, then later event time) covering it.
5. Offsets of the requested range no usable upload holds (deleted by retention, never
   tiered) are reported as gaps, for the caller's ``failOnDataLoss``.

A topic deleted and recreated has several topic ids under its name: the plan takes the
one asked for, else the one with the newest upload, and says which. Blocking; any thread.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.leader_epoch_lineage import filtered_leader_epoch_map, lineage_end_offset
from tiercel.tiered.rsm.object_layout import LOG_SUFFIX, object_key
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.remote_listing import list_remote_segments, topic_ids
from tiercel.tiered.rsm.remote_storage_manager import IndexType, RemoteLogSegmentMetadata

__all__ = [
    "OffsetGap",
    "PartitionPlan",
    "RemoteTierError",
    "SegmentRange",
    "TopicPlan",
    "complete_segments",
    "parse_epoch_checkpoint",
    "plan_partition",
    "plan_topic",
    "topic_partitions",
    "winning_lineage",
]


class RemoteTierError(ValueError):
    """The remote tier cannot be read as asked: a corrupt manifest or checkpoint, an
    unknown topic id, a batch failing its CRC. The message names the object."""


@dataclass(frozen=True, slots=True)
class SegmentRange:
    """Offsets ``first_offset`` to ``last_offset`` (inclusive) of one upload's records."""

    segment: RemoteLogSegmentMetadata
    first_offset: int
    last_offset: int

    @property
    def log_key(self) -> str:
        return object_key(self.segment, LOG_SUFFIX)

    @property
    def offset_index_key(self) -> str:
        return object_key(self.segment, IndexType.OFFSET.value)


@dataclass(frozen=True, slots=True)
class OffsetGap:
    """Offsets ``first_offset`` to ``last_offset`` (inclusive) that the tier lacks."""

    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """One partition's reads: ``ranges`` in offset order, no gap or overlap between them
    but the ``gaps`` listed; ``lineage`` is the winning epoch lineage (empty when the
    partition has no complete upload)."""

    topic_partition: TopicPartition
    topic_id: str
    ranges: tuple[SegmentRange, ...]
    gaps: tuple[OffsetGap, ...]
    lineage: tuple[EpochEntry, ...]

    @property
    def start_offset(self) -> int | None:
        """The first offset the plan covers, a gap's or a range's."""
        firsts = [r.first_offset for r in self.ranges] + [g.first_offset for g in self.gaps]
        return min(firsts, default=None)

    @property
    def end_offset(self) -> int | None:
        """One past the last offset the plan covers."""
        lasts = [r.last_offset for r in self.ranges] + [g.last_offset for g in self.gaps]
        return max(lasts) + 1 if lasts else None


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """The plan of some partitions of ``topic``: ``topic_id`` is the one read, among the
    ``topic_ids`` found under the topic's name."""

    topic: str
    topic_id: str | None
    topic_ids: tuple[str, ...]
    partitions: tuple[PartitionPlan, ...]


@dataclass(frozen=True, slots=True)
class _Candidate:
    segment: RemoteLogSegmentMetadata
    first: int
    last: int

    @property
    def priority(self) -> tuple[int, int, int]:
        epochs = self.segment.segment_leader_epochs
        return (max(epochs, default=-1), self.segment.event_timestamp_ms, self.last)


def parse_epoch_checkpoint(data: bytes, where: str) -> list[EpochEntry]:
    """The entries of a leader-epoch checkpoint object (version 0); RemoteTierError
    naming ``where`` if it is not one."""
    try:
        lines = data.decode().split()
        if lines[0] != "0" or int(lines[1]) * 2 != len(lines) - 2:
            raise ValueError("bad version or entry count")
        numbers = [int(field) for field in lines[2:]]
    except (UnicodeDecodeError, IndexError, ValueError) as e:
        raise RemoteTierError(f"{where}: not a leader-epoch checkpoint ({e})") from e
    return [EpochEntry(e, s) for e, s in zip(numbers[::2], numbers[1::2], strict=True)]


def complete_segments(
    store: ObjectStore, topic_partition: TopicPartition, topic_id: str
) -> list[RemoteLogSegmentMetadata]:
    """The complete uploads of the partition (rule 1); RemoteTierError for a manifest
    that is there but unreadable."""
    found = []
    for listed in list_remote_segments(store, topic_partition, topic_id):
        if listed.manifest_error is not None:
            raise RemoteTierError(
                f"manifest of segment {listed.segment_id} of {topic_partition} "
                f"(topic id {topic_id}): {listed.manifest_error}"
            )
        if listed.manifest is not None:
            found.append(listed.manifest.metadata)
    return found


def winning_lineage(
    store: ObjectStore, segments: Sequence[RemoteLogSegmentMetadata]
) -> list[EpochEntry]:
    """Rule 2: the checkpoint of the upload reaching the highest (epoch, end offset)."""
    if not segments:
        return []
    winner = max(segments, key=lambda m: (max(m.segment_leader_epochs, default=-1), m.end_offset))
    key = object_key(winner, IndexType.LEADER_EPOCH.value)
    return parse_epoch_checkpoint(store.get(key), key)


def plan_partition(
    store: ObjectStore,
    topic_partition: TopicPartition,
    topic_id: str,
    first_offset: int | None = None,
    last_offset: int | None = None,
    segments: Sequence[RemoteLogSegmentMetadata] | None = None,
) -> PartitionPlan:
    """The reads of ``topic_partition``'s offsets ``first_offset`` to ``last_offset``
    (inclusive; by default the tier's first and last offsets); ``segments`` are its
    complete uploads when the caller has listed them already."""
    if segments is None:
        segments = complete_segments(store, topic_partition, topic_id)
    lineage = winning_lineage(store, segments)
    epochs = filtered_leader_epoch_map(lineage)
    candidates = []
    for segment in segments:
        end = lineage_end_offset(segment, epochs, segment.start_offset) if epochs else 0
        if end > segment.start_offset:
            candidates.append(_Candidate(segment, segment.start_offset, end - 1))
    lo = min((c.first for c in candidates), default=0) if first_offset is None else first_offset
    hi = max((c.last for c in candidates), default=-1) if last_offset is None else last_offset
    ranges, gaps = _cover(candidates, lo, hi)
    return PartitionPlan(topic_partition, topic_id, ranges, gaps, tuple(lineage))


def _cover(
    candidates: Iterable[_Candidate], lo: int, hi: int
) -> tuple[tuple[SegmentRange, ...], tuple[OffsetGap, ...]]:
    """Rules 4 and 5 over ``lo`` to ``hi``: at each offset the newest candidate holding
    it, read until its end or a newer one starts; the offsets none holds as gaps."""
    pending = sorted(candidates, key=lambda c: c.first)
    ranges: list[SegmentRange] = []
    gaps: list[OffsetGap] = []
    holding: list[tuple[tuple[int, int, int], int, _Candidate]] = []  # max-heap by priority
    i, offset = 0, lo
    while offset <= hi:
        while i < len(pending) and pending[i].first <= offset:
            c = pending[i]
            epoch, event_ms, end = c.priority
            heapq.heappush(holding, ((-epoch, -event_ms, -end), i, c))
            i += 1
        while holding and holding[0][2].last < offset:
            heapq.heappop(holding)
        if holding:
            chosen = holding[0][2]
            last = min(chosen.last, hi, _newer_start(pending, i, chosen) - 1)
            ranges.append(SegmentRange(chosen.segment, offset, last))
        else:
            last = min(pending[i].first - 1 if i < len(pending) else hi, hi)
            gaps.append(OffsetGap(offset, last))
        offset = last + 1
    return tuple(ranges), tuple(gaps)


def _newer_start(pending: Sequence[_Candidate], i: int, chosen: _Candidate) -> int:
    """Where the first candidate from ``pending[i]`` on that is newer than ``chosen``
    starts within it (past its end if none)."""
    for candidate in itertools.islice(pending, i, None):
        if candidate.first > chosen.last:
            break
        if candidate.priority > chosen.priority:
            return candidate.first
    return chosen.last + 1


def topic_partitions(store: ObjectStore, topic: str, topic_id: str) -> list[int]:
    """The partitions with objects under ``topic``'s ``topic_id``, sorted."""
    prefix = f"{topic}-{topic_id}/"
    found = []
    for folder in store.list_folders(prefix):
        name = folder[len(prefix) :].rstrip("/")
        if name.isdigit():
            found.append(int(name))
    return sorted(found)


def plan_topic(
    store: ObjectStore,
    topic: str,
    partitions: Sequence[int] | None = None,
    topic_id: str | None = None,
) -> TopicPlan:
    """The plans of ``topic``'s ``partitions`` (all it has in the tier by default), of
    ``topic_id``, else of the topic id with the newest upload (see the module docstring).
    RemoteTierError when ``topic_id`` is not in the tier."""
    ids = topic_ids(store, topic)
    if topic_id is not None and topic_id not in ids:
        raise RemoteTierError(f"topic {topic!r} has no objects with topic id {topic_id}")
    listed = {
        one_id: {
            p: complete_segments(store, TopicPartition(topic, p), one_id)
            for p in topic_partitions(store, topic, one_id)
        }
        for one_id in ([topic_id] if topic_id is not None else ids)
    }
    if not listed:
        return TopicPlan(topic, None, (), ())
    chosen = max(
        listed,
        key=lambda i: max(
            (m.event_timestamp_ms for s in listed[i].values() for m in s), default=-1
        ),
    )
    wanted = sorted(listed[chosen]) if partitions is None else sorted(partitions)
    plans = tuple(
        plan_partition(store, TopicPartition(topic, p), chosen, segments=listed[chosen].get(p, []))
        for p in wanted
    )
    return TopicPlan(topic, chosen, tuple(ids), plans)
