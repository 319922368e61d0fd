"""What a follower needs before it fetches from its leader's local log start (Kafka's
ReplicaFetcherTierStateMachine.buildRemoteLogAuxState, KIP-405 BuildingRemoteLogAuxState).

A follower told OFFSET_MOVED_TO_TIERED_STORAGE restarts its log at the leader's local
start. The records below it stay remote, but the follower still needs their leader-epoch
history (to answer OffsetForLeaderEpoch and truncate correctly) and the producer state
they leave (to keep idempotence). Both travel with the remote segment holding the offset
just before the leader's local start: its ``leader-epoch-checkpoint`` object (the
lineage up to the segment's end) and its producer ``snapshot`` (the state after it).
The follower restarts at that segment's end + 1, which is the leader's local start
unless the leader still keeps the segment locally.

The lookup (`find_aux_state_segment`) reads the RLMM: event-loop only. The fetch
(`fetch_remote_log_aux_state`) reads the object store: blocking, for the reader pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.tiered.rlmm.remote_log_metadata_manager import RemoteLogMetadataManager
from tiercel.tiered.rsm.remote_storage_manager import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
)

__all__ = [
    "RemoteLogAuxState",
    "aux_state_target_epoch",
    "fetch_remote_log_aux_state",
    "find_aux_state_segment",
    "parse_leader_epoch_checkpoint",
]

_CHECKPOINT_VERSION = 0


@dataclass(frozen=True, slots=True)
class RemoteLogAuxState:
    """The follower's state to install: its log restarts, empty, at ``next_offset``,
    with ``epochs`` (all starting below ``next_offset``) and the producer snapshot taken
    at ``next_offset``, if the segment has one."""

    next_offset: int
    epochs: tuple[EpochEntry, ...]
    producer_snapshot: bytes | None


def aux_state_target_epoch(
    epoch_for_leader_local_start: int,
    earlier_epoch_end: tuple[int, int] | None,
    leader_local_log_start_offset: int,
) -> int:
    """The epoch of the offset before the leader's local start (Kafka's choice in
    buildRemoteLogAuxState). ``earlier_epoch_end`` is the leader's OffsetForLeaderEpoch
    answer (epoch, end offset, exclusive) for the epoch before
    ``epoch_for_leader_local_start``; it covers that offset when its end is above it,
    and its epoch then is the one to look up (it skips epochs that wrote nothing)."""
    if epoch_for_leader_local_start == 0 or earlier_epoch_end is None:
        return epoch_for_leader_local_start
    epoch, end_offset = earlier_epoch_end
    return epoch if end_offset > leader_local_log_start_offset - 1 else epoch_for_leader_local_start


def find_aux_state_segment(
    rlmm: RemoteLogMetadataManager,
    tip: TopicIdPartition,
    target_epoch: int,
    leader_local_log_start_offset: int,
) -> RemoteLogSegmentMetadata | None:
    """The finished remote segment holding the offset before the leader's local start;
    None when it is not (yet) known here. Event-loop only."""
    return rlmm.remote_log_segment_metadata(tip, target_epoch, leader_local_log_start_offset - 1)


def parse_leader_epoch_checkpoint(data: bytes) -> list[EpochEntry]:
    """Entries of a ``leader-epoch-checkpoint`` (version 0, a count, "epoch offset"
    lines); RemoteStorageError when the object is not one."""
    try:
        lines = data.decode("utf-8").split()
        if not lines:
            return []
        if int(lines[0]) != _CHECKPOINT_VERSION:
            raise ValueError(f"version {lines[0]}")
        count = int(lines[1]) if len(lines) > 1 else 0
        fields = [int(field) for field in lines[2:]]
        if len(fields) != 2 * count:
            raise ValueError(f"{count} entries announced, {len(fields) / 2} found")
        return [EpochEntry(fields[i], fields[i + 1]) for i in range(0, len(fields), 2)]
    except (UnicodeDecodeError, ValueError) as e:
        raise RemoteStorageError(f"a malformed remote leader-epoch checkpoint: {e}") from e


def fetch_remote_log_aux_state(
    rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata
) -> RemoteLogAuxState:
    """The segment's epochs (those starting at or beyond its end dropped, as Kafka's
    follower keeps only the lineage below where its log restarts) and producer
    snapshot. Blocking: the reader pool."""
    next_offset = metadata.end_offset + 1
    checkpoint = rsm.fetch_index(metadata, IndexType.LEADER_EPOCH)
    epochs = tuple(
        entry
        for entry in parse_leader_epoch_checkpoint(checkpoint)
        if entry.start_offset < next_offset
    )
    try:
        snapshot: bytes | None = rsm.fetch_index(metadata, IndexType.PRODUCER_SNAPSHOT)
    except RemoteResourceNotFoundError:
        snapshot = None  # no producer had written when the segment was rolled
    return RemoteLogAuxState(next_offset, epochs, snapshot)
