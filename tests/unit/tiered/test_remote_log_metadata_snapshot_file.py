"""The RLMM snapshot file: round trips, every kind of damage detected, and a view
rebuilt from it equal to the one it was taken from (replay order)."""

from __future__ import annotations

import os
import uuid

import pytest

from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_cache import RemoteLogMetadataCache
from tiercel.tiered.rlmm.remote_log_metadata_manager import (
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from tiercel.tiered.rlmm.remote_log_metadata_snapshot_file import (
    CorruptSnapshotError,
    MetadataPartitionSnapshot,
    PartitionView,
    decode_snapshot,
    encode_snapshot,
    read_snapshots,
    snapshot_path,
    write_snapshot,
)
from tiercel.tiered.rlmm.remote_log_segment_metadata_snapshot import (
    RemoteLogSegmentMetadataSnapshot,
)
from tiercel.tiered.rlmm.remote_partition_metadata_store import RemotePartitionMetadataStore
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

TP = TopicIdPartition(uuid.UUID(int=7), TopicPartition("orders", 3))
OTHER = TopicIdPartition(uuid.UUID(int=8), TopicPartition("clicks", 0))


def _segment(start: int, end: int, epochs: dict[int, int]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TP.topic_id, TP.topic_partition, uuid.uuid4()),
        start,
        end,
        end,
        1,
        0,
        end - start + 1,
        epochs,
    )


SNAPSHOT = MetadataPartitionSnapshot(
    metadata_partition=4,
    consumed_offset=41,
    partitions={
        TP: PartitionView(
            [
                RemoteLogSegmentMetadataSnapshot.create(_segment(0, 9, {0: 0})),
                RemoteLogSegmentMetadataSnapshot(
                    uuid.uuid4(), 10, 19, 19, 2, 3, 10, {1: 10}, RemoteLogSegmentState(1), b"x"
                ),
            ],
            RemotePartitionDeleteMetadata(
                TP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 5, 0
            ),
        ),
        OTHER: PartitionView(),
    },
)


def test_round_trip() -> None:
    assert decode_snapshot(encode_snapshot(SNAPSHOT)) == SNAPSHOT


@pytest.mark.parametrize("position", [0, 3, 20, 60, -5])
def test_a_flipped_byte_is_detected(position: int) -> None:
    data = bytearray(encode_snapshot(SNAPSHOT))
    data[position] ^= 0x40
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(data))


@pytest.mark.parametrize("length", [0, 5, 22, 100])
def test_a_truncated_file_is_detected(length: int) -> None:
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(encode_snapshot(SNAPSHOT)[:length])


def test_read_snapshots_skips_damaged_and_misnamed_files(tmp_path: os.PathLike[str]) -> None:
    directory = os.fspath(tmp_path)
    write_snapshot(directory, SNAPSHOT)
    good = snapshot_path(directory, 4)
    with open(good, "rb") as file:
        data = file.read()
    with open(snapshot_path(directory, 5), "wb") as file:  # a copy under another name
        file.write(data)
    with open(snapshot_path(directory, 6), "wb") as file:
        file.write(data[:-1])
    with open(os.path.join(directory, "unrelated"), "wb") as file:
        file.write(b"?")

    assert read_snapshots(directory) == {4: SNAPSHOT}
    assert read_snapshots(os.path.join(directory, "missing")) == {}


def test_a_replayed_view_equals_the_original() -> None:
    """A new leader re-uploads offsets 0-19 (unclean election): the segment that finished
    last serves epoch 0; one that only started and one being deleted are kept too."""
    cache = RemoteLogMetadataCache()
    old = _segment(0, 19, {0: 0})
    new = _segment(0, 29, {0: 0, 1: 20})
    copying = _segment(30, 39, {1: 30})
    deleting = _segment(0, 9, {0: 0})
    for segment in (new, old, copying, deleting):
        cache.add_copy_in_progress_segment(segment)

    def move(segment: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
        cache.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(segment.remote_log_segment_id, 1, state, 1)
        )

    move(old, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    move(new, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)  # replaces old at epoch 0 start 0
    move(deleting, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)

    replay = cache.segments_in_replay_order()
    store = RemotePartitionMetadataStore()
    snapshot = [RemoteLogSegmentMetadataSnapshot.create(m) for m in replay]
    store.load_partition(TP, [s.to_metadata(TP) for s in snapshot], None)
    restored = store.cache(TP)

    for epoch, offset in [(0, 0), (0, 15), (0, 19), (1, 25), (1, 35)]:
        assert restored.remote_log_segment_metadata(
            epoch, offset
        ) == cache.remote_log_segment_metadata(epoch, offset)
    assert restored.remote_log_segment_metadata(0, 5) == new.create_with_updates(
        RemoteLogSegmentMetadataUpdate(
            new.remote_log_segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
        )
    )
    assert restored.list_remote_log_segments() == cache.list_remote_log_segments()
    for epoch in (0, 1):
        assert restored.highest_offset_for_epoch(epoch) == cache.highest_offset_for_epoch(epoch)
        assert restored.remote_log_size(epoch) == cache.remote_log_size(epoch)
