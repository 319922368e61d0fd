"""Planning from a listing alone, over manifests and epoch checkpoints written in the
object layout: incomplete uploads, gaps, overlaps, recreated topics, corrupt manifests."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.leader_epoch_lineage import epoch_entries_as_bytes
from tiercel.tiered.reader import OffsetGap, RemoteTierError, plan_partition, plan_topic
from tiercel.tiered.rsm.local_tiered_storage import LocalDirectoryStore
from tiercel.tiered.rsm.object_layout import (
    LOG_SUFFIX,
    MANIFEST_SUFFIX,
    encode_manifest,
    object_key,
)
from tiercel.tiered.rsm.remote_storage_manager import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
)

TOPIC_ID = uuid.UUID(int=1)
TP = TopicPartition("t", 0)


def upload(
    store: LocalDirectoryStore,
    start: int,
    end: int,
    epochs: dict[int, int],
    lineage: list[tuple[int, int]] | None = None,
    *,
    complete: bool = True,
    topic_id: uuid.UUID = TOPIC_ID,
    tp: TopicPartition = TP,
    event_ms: int = 0,
) -> RemoteLogSegmentMetadata:
    """The objects of one upload; ``lineage`` (the epoch checkpoint) defaults to its
    own epochs."""
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(topic_id, tp), start, end, 0, 0, event_ms, 100, epochs
    )
    entries = [EpochEntry(e, s) for e, s in (lineage or sorted(epochs.items()))]
    store.put_bytes(object_key(metadata, LOG_SUFFIX), b"")
    store.put_bytes(
        object_key(metadata, IndexType.LEADER_EPOCH.value), epoch_entries_as_bytes(entries)
    )
    if complete:
        objects = frozenset({LOG_SUFFIX, IndexType.LEADER_EPOCH.value})
        store.put_bytes(object_key(metadata, MANIFEST_SUFFIX), encode_manifest(metadata, objects))
    return metadata


def spans(store: LocalDirectoryStore, **kwargs: int) -> list[tuple[int, int, int]]:
    plan = plan_partition(store, TP, uuid_to_kafka_str(TOPIC_ID), **kwargs)
    return [(r.first_offset, r.last_offset, r.segment.start_offset) for r in plan.ranges]


@pytest.fixture
def store(tmp_path: Path) -> LocalDirectoryStore:
    return LocalDirectoryStore(str(tmp_path))


def test_incomplete_uploads_are_ignored(store: LocalDirectoryStore) -> None:
    upload(store, 0, 9, {0: 0})
    upload(store, 10, 19, {0: 0}, complete=False)
    [plan] = plan_topic(store, "t").partitions
    assert [(r.first_offset, r.last_offset) for r in plan.ranges] == [(0, 9)]
    assert plan.gaps == ()


def test_a_deleted_segment_is_a_gap_and_a_range_before_the_tier_too(
    store: LocalDirectoryStore,
) -> None:
    upload(store, 10, 19, {0: 10})
    upload(store, 30, 39, {0: 10, 1: 35}, [(0, 10), (1, 35)])
    plan = plan_partition(store, TP, uuid_to_kafka_str(TOPIC_ID), 5, 45)
    assert [(r.first_offset, r.last_offset) for r in plan.ranges] == [(10, 19), (30, 39)]
    assert plan.gaps == (OffsetGap(5, 9), OffsetGap(20, 29), OffsetGap(40, 45))


def test_overlapping_uploads_of_one_lineage_are_read_once_newest_first(
    store: LocalDirectoryStore,
) -> None:
    """A's 0..9 (LE-0) and B's 5..14 (LE-0 to 9, LE-1 from 10) after a clean leader
    change, segments rolled elsewhere: 0..4 from A, 5..14 from B (the newer)."""
    upload(store, 0, 9, {0: 0})
    upload(store, 5, 14, {0: 5, 1: 10}, [(0, 0), (1, 10)])
    assert spans(store) == [(0, 4, 0), (5, 14, 5)]
    assert spans(store, first_offset=3, last_offset=6) == [(3, 4, 0), (5, 6, 5)]


def test_an_upload_leaving_the_lineage_is_read_up_to_where_it_leaves(
    store: LocalDirectoryStore,
) -> None:
    """A's 0..9 (LE-0); then unclean B's lineage LE-0 to 4, LE-2 from 5, and its 5..12:
    A's upload holds the lineage's records only below 5."""
    upload(store, 0, 9, {0: 0})
    upload(store, 5, 12, {2: 5}, [(0, 0), (2, 5)])
    assert spans(store) == [(0, 4, 0), (5, 12, 5)]


def test_an_upload_starting_off_the_lineage_is_not_read(store: LocalDirectoryStore) -> None:
    """An upload whose first epoch the winner's lineage never had (LE-1, truncated)."""
    upload(store, 0, 4, {0: 0})
    upload(store, 5, 9, {1: 5})
    upload(store, 5, 7, {2: 5}, [(0, 0), (2, 5)])
    assert spans(store) == [(0, 4, 0), (5, 7, 5)]


def test_a_recreated_topic_reads_its_newest_topic_id_unless_told(
    store: LocalDirectoryStore,
) -> None:
    new_id = uuid.UUID(int=2)
    upload(store, 0, 9, {0: 0}, event_ms=100)
    upload(store, 0, 4, {0: 0}, topic_id=new_id, event_ms=200)
    upload(store, 0, 2, {0: 0}, topic_id=new_id, tp=TopicPartition("t", 1), event_ms=200)
    plan = plan_topic(store, "t")
    assert plan.topic_id == uuid_to_kafka_str(new_id)
    assert set(plan.topic_ids) == {uuid_to_kafka_str(TOPIC_ID), uuid_to_kafka_str(new_id)}
    assert [(p.topic_partition.partition, p.end_offset) for p in plan.partitions] == [
        (0, 5),
        (1, 3),
    ]
    old = plan_topic(store, "t", topic_id=uuid_to_kafka_str(TOPIC_ID))
    assert [(p.topic_partition.partition, p.end_offset) for p in old.partitions] == [(0, 10)]
    with pytest.raises(RemoteTierError, match="no objects with topic id"):
        plan_topic(store, "t", topic_id=uuid_to_kafka_str(uuid.UUID(int=3)))


def test_a_topic_with_nothing_tiered_has_an_empty_plan(store: LocalDirectoryStore) -> None:
    plan = plan_topic(store, "absent")
    assert (plan.topic_id, plan.partitions) == (None, ())
    upload(store, 0, 9, {0: 0}, complete=False)
    [partition] = plan_topic(store, "t").partitions
    assert (partition.ranges, partition.gaps, partition.start_offset) == ((), (), None)


def test_a_corrupt_manifest_or_checkpoint_is_an_error_naming_it(
    store: LocalDirectoryStore,
) -> None:
    metadata = upload(store, 0, 9, {0: 0})
    key = object_key(metadata, IndexType.LEADER_EPOCH.value)
    store.put_bytes(key, b"0\n2\n0 0\n")
    with pytest.raises(RemoteTierError, match=key):
        plan_topic(store, "t")
    store.put_bytes(object_key(metadata, MANIFEST_SUFFIX), b"{")
    with pytest.raises(RemoteTierError, match="manifest of segment"):
        plan_topic(store, "t")


class CheckpointStore:
    """Just the `get` planning needs of a store: the winner's epoch checkpoint."""

    def __init__(self, lineage: list[tuple[int, int]]) -> None:
        self.data = epoch_entries_as_bytes([EpochEntry(e, s) for e, s in lineage])

    def get(self, key: str) -> bytes:
        assert key.endswith(IndexType.LEADER_EPOCH.value)
        return self.data


def epochs_between(lineage: list[tuple[int, int]], start: int, end: int) -> dict[int, int]:
    """The segment epoch map of offsets ``start`` to ``end`` on ``lineage``."""
    found = {}
    for i, (epoch, first) in enumerate(lineage):
        next_first = lineage[i + 1][1] if i + 1 < len(lineage) else end + 1
        if first <= end and next_first > start:
            found[epoch] = max(first, start)
    return found


def epoch_at(entries: Iterable[tuple[int, int]], offset: int) -> int:
    """The epoch whose records hold ``offset``: the last one starting at or below it."""
    return max((first, epoch) for epoch, first in entries if first <= offset)[1]


@given(
    starts=st.lists(st.integers(1, 60), min_size=1, max_size=3, unique=True),
    spans_=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 20)), min_size=1, max_size=8),
    strays=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 20)), max_size=3),
)
@settings(max_examples=200, deadline=None)
def test_ranges_and_gaps_cover_each_offset_once_on_the_lineage(
    starts: list[int], spans_: list[tuple[int, int]], strays: list[tuple[int, int]]
) -> None:
    """Uploads of a lineage (epochs 0, 2, 4, ...) and strays of odd epochs (truncated
    lineages) in any overlap: the plan's ranges and gaps tile the range exactly, every
    range lies on the lineage, and no offset an on-lineage upload holds is a gap."""
    lineage = [(0, 0)] + [(2 * (i + 1), s) for i, s in enumerate(sorted(starts))]
    segments = [
        RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate(TOPIC_ID, TP),
            s,
            s + n,
            0,
            0,
            0,
            1,
            epochs_between(lineage, s, s + n),
        )
        for s, n in spans_
    ]
    segments += [
        RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate(TOPIC_ID, TP), s, s + n, 0, 0, 0, 1, {2 * i + 1: s}
        )
        for i, (s, n) in enumerate(strays)
    ]
    # The last lineage upload reaching the highest epoch is the winner: end it there.
    winner_end = max(s.end_offset for s in segments[: len(spans_)])
    last_epoch = max(e for e, first in lineage if first <= winner_end)
    segments = [s for s in segments if max(s.segment_leader_epochs) <= last_epoch]
    store = CheckpointStore([(e, s) for e, s in lineage if e <= last_epoch])
    plan = plan_partition(store, TP, "x", 0, 100, segments=segments)  # type: ignore[arg-type]
    tiles = sorted(
        [(r.first_offset, r.last_offset) for r in plan.ranges]
        + [(g.first_offset, g.last_offset) for g in plan.gaps]
    )
    assert tiles[0][0] == 0 and tiles[-1][1] == 100
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(tiles))
    for r in plan.ranges:
        assert r.segment.start_offset <= r.first_offset <= r.last_offset <= r.segment.end_offset
        for offset in range(r.first_offset, r.last_offset + 1):
            assert epoch_at(r.segment.segment_leader_epochs.items(), offset) == epoch_at(
                lineage, offset
            )
    held = {o for s in segments[: len(spans_)] for o in range(s.start_offset, s.end_offset + 1)}
    for g in plan.gaps:
        assert not held & set(range(g.first_offset, g.last_offset + 1))
