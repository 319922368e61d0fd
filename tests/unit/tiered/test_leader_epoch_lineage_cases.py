"""Kafka's isRemoteSegmentWithinLeaderEpochs: a remote segment is served only if its
epochs are a slice of the log's leader-epoch lineage and it ends below the log end."""

from __future__ import annotations

import uuid

import pytest

from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.leader_epoch_lineage import (
    filtered_leader_epoch_map,
    is_remote_segment_within_leader_epochs,
)
from tiercel.tiered.rsm.remote_storage_manager import RemoteLogSegmentId, RemoteLogSegmentMetadata

LINEAGE = [EpochEntry(5, 10), EpochEntry(7, 15), EpochEntry(9, 100)]


def segment(start: int, end: int, epochs: dict[int, int]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(uuid.uuid4(), TopicPartition("t", 0)),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=0,
        broker_id=0,
        event_timestamp_ms=0,
        segment_size_in_bytes=1,
        segment_leader_epochs=epochs,
    )


@pytest.mark.parametrize(
    ("start", "end", "epochs", "expected"),
    [
        (10, 14, {5: 10}, True),
        (10, 120, {5: 10, 7: 15, 9: 100}, True),
        (12, 50, {5: 12, 7: 15}, True),  # the first epoch may start later
        (10, 16, {5: 10}, False),  # epoch 5 runs past epoch 7's start
        (10, 50, {5: 10, 7: 16}, False),  # epoch 7 starts elsewhere on this lineage
        (10, 50, {5: 10, 6: 15}, False),  # an epoch this lineage never had
        (100, 200, {9: 100}, False),  # not below the log end offset (200)
        # Kafka's example: the lineage lost epoch 5 to retention, the segment kept it.
        (14, 150, {5: 14, 7: 15, 9: 100}, True),
        (0, 9, {3: 0}, False),  # before the lineage
    ],
)
def test_segments_on_and_off_the_lineage(
    start: int, end: int, epochs: dict[int, int], expected: bool
) -> None:
    lineage = LINEAGE if start != 14 else LINEAGE[1:]
    on_lineage = is_remote_segment_within_leader_epochs(
        segment(start, end, epochs), 200, filtered_leader_epoch_map(lineage)
    )
    assert on_lineage is expected


def test_epochs_without_records_are_ignored() -> None:
    """An epoch starting where the next one does wrote nothing (buildFilteredLeaderEpochMap)."""
    assert is_remote_segment_within_leader_epochs(
        segment(10, 20, {5: 10, 6: 15, 7: 15}), 200, filtered_leader_epoch_map(LINEAGE)
    )
