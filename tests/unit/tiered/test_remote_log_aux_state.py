"""The follower's BuildingRemoteLogAuxState step (Kafka's
ReplicaFetcherTierStateMachine.buildRemoteLogAuxState): the segment before the leader's
local start, its epochs cut at the follower's new start, and its producer snapshot."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from support.tiering import (
    BASE_TS,
    open_log,
    produce,
    scheduler,
    small_config,
    tier_rolled_segments,
    topic_id_partition,
)
from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.remote_log_aux_state import (
    aux_state_target_epoch,
    fetch_remote_log_aux_state,
    find_aux_state_segment,
    parse_leader_epoch_checkpoint,
)
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageError,
)

__all__ = ["scheduler"]


async def test_aux_state_of_the_segment_before_the_leaders_local_start(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(str(tmp_path / "orders-0"), small_config(), scheduler)
    for i in range(60):
        produce(log, [b"v" * 90] * 2, BASE_TS + i, 0 if i < 20 else 2 if i < 40 else 5)
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    rlmm = InMemoryRemoteLogMetadataManager()
    segments = list(log.segments)
    snapshots = {s.base_offset: f"snapshot@{s.base_offset}".encode() for s in segments[1:]}
    remote = await tier_rolled_segments(log, rsm, rlmm, snapshots)
    # The leader keeps locally everything from the segment after an epoch-2 segment on.
    holder = next(m for m in remote if list(m.segment_leader_epochs) == [2])
    local_start = holder.end_offset + 1
    epoch_at_start = log.leader_epoch_cache.epoch_for_offset(local_start)
    assert epoch_at_start is not None
    target = aux_state_target_epoch(epoch_at_start, None, local_start)

    found = find_aux_state_segment(rlmm, topic_id_partition(log), target, local_start)
    assert found == holder
    state = fetch_remote_log_aux_state(rsm, holder)
    assert state.next_offset == local_start
    assert state.epochs == tuple(
        e for e in log.leader_epoch_cache.entries if e.start_offset < local_start
    )
    assert state.epochs[-1].epoch == 2
    assert state.producer_snapshot == snapshots[local_start]
    await log.close()


async def test_epochs_at_or_beyond_the_new_start_are_dropped(tmp_path: Path) -> None:
    """The uploaded checkpoint may run past the segment (an epoch starting right at its
    end): the follower keeps only the entries below where its log restarts."""
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    log_file = tmp_path / "seg.log"
    log_file.write_bytes(b"")
    for suffix in ("index", "timeindex"):
        (tmp_path / f"seg.{suffix}").write_bytes(b"")
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(uuid.uuid4(), TopicPartition("t", 0)),
        start_offset=100,
        end_offset=199,
        max_timestamp_ms=0,
        broker_id=0,
        event_timestamp_ms=0,
        segment_size_in_bytes=0,
        segment_leader_epochs={3: 100},
    )
    checkpoint = b"0\n3\n1 0\n3 100\n4 200\n"
    rsm.copy_log_segment_data(
        metadata,
        LogSegmentData(
            str(log_file),
            str(tmp_path / "seg.index"),
            str(tmp_path / "seg.timeindex"),
            None,
            None,
            checkpoint,
        ),
    )
    state = fetch_remote_log_aux_state(rsm, metadata)
    assert state.next_offset == 200
    assert state.epochs == (EpochEntry(1, 0), EpochEntry(3, 100))
    assert state.producer_snapshot is None


def test_the_target_epoch_skips_epochs_that_wrote_nothing() -> None:
    """Kafka's example: epochs 0@20, 1@85, (2 wrote nothing), 3@90; the leader's local
    start is 90 (epoch 3) and OffsetForLeaderEpoch(2) answers (1, 90): offset 89 is
    epoch 1's."""
    assert aux_state_target_epoch(3, (1, 90), 90) == 1
    assert aux_state_target_epoch(3, (2, 80), 90) == 3  # the earlier epoch ends before 89
    assert aux_state_target_epoch(0, (0, 10), 90) == 0


@pytest.mark.parametrize("data", [b"1\n0\n", b"0\n2\n1 0\n", b"0\n1\nx y\n", b"\xff"])
def test_a_malformed_checkpoint_is_a_remote_storage_error(data: bytes) -> None:
    with pytest.raises(RemoteStorageError):
        parse_leader_epoch_checkpoint(data)
