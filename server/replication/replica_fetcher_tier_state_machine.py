"""A follower told OFFSET_MOVED_TO_TIERED_STORAGE (109) catches up through the remote tier
(Kafka's ReplicaFetcherTierStateMachine, KIP-405's BuildingRemoteLogAuxState).

The leader has moved the records the follower asked for to the remote tier and no
longer has them locally. The follower asks the leader's local log start and its epoch
(ListOffsets EARLIEST_LOCAL) and its log start (EARLIEST), finds the remote segment
holding the offset just before the leader's local start, and from it installs what the
remote records leave behind: its log restarts, empty, at that segment's end + 1 with
its log start at the leader's; the leader-epoch entries below that offset; the producer
snapshot there. It then fetches normally from that offset. A segment that goes on past
the leader's local start with records the leader does not have (an old leader's, after
an unclean election) restarts the log at the leader's local start instead, without a
producer snapshot. The leader-epoch checkpoint is written and synced before the
follower fetches on. When the segment is not known yet (this broker's remote metadata
still loading) it retries after replica.fetch.backoff.ms, as Kafka does.

Event-loop only; the object-store reads run in the executor the fetcher passes, its own
thread, as Kafka's TierStateMachine calls RemoteStorageManager.fetchIndex on the replica
fetcher thread: never in the remote reader pool, so a rebuild neither waits behind
consumers' remote reads nor counts against ``remote.log.reader.max.pending.tasks``
(Kafka bounds rebuilds by its fetcher threads instead: one at a time per fetcher).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable

from tiercel.protocol.errors import ErrorCode
from tiercel.server.partition import Partition
from tiercel.server.remote_log_reads import RemoteLogReads
from tiercel.server.replication.leader_end_point import LeaderEndPoint
from tiercel.storage.producer_snapshot import CorruptSnapshotError, decode_snapshot
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.leader_epoch_lineage import filtered_leader_epoch_map
from tiercel.tiered.remote_log_aux_state import (
    RemoteLogAuxState,
    aux_state_target_epoch,
    fetch_remote_log_aux_state,
    find_aux_state_segment,
)
from tiercel.tiered.rsm.remote_storage_manager import RemoteLogSegmentMetadata, RemoteStorageError

__all__ = ["TierStateMachineError", "build_remote_log_aux_state"]


class TierStateMachineError(Exception):
    """The aux state cannot be built now; the partition backs off and tries again."""


def _check(error: ErrorCode, what: str) -> None:
    if error != ErrorCode.none:
        raise TierStateMachineError(f"{what}: {error.name}")


async def _target_epoch(
    leader: LeaderEndPoint,
    tp: TopicPartition,
    current_leader_epoch: int,
    local_start: int,
    epoch_at_local_start: int,
) -> int:
    """The epoch of ``local_start - 1``: the leader's end of the epoch before the one
    at its local start tells whether that offset belongs to an earlier epoch (Kafka's
    fetchEarlierEpochEndOffset)."""
    if epoch_at_local_start == 0:
        return 0
    answers = await leader.fetch_epoch_end_offsets(
        {tp: (current_leader_epoch, epoch_at_local_start - 1)}
    )
    answer = answers.get(tp)
    if answer is None:
        raise TierStateMachineError("no OffsetForLeaderEpoch answer")
    _check(answer.error, "offset_for_leader_epoch")
    earlier = (answer.leader_epoch, answer.end_offset) if answer.leader_epoch >= 0 else None
    return aux_state_target_epoch(epoch_at_local_start, earlier, local_start)


async def _on_leader_lineage(
    leader: LeaderEndPoint,
    tp: TopicPartition,
    current_leader_epoch: int,
    metadata: RemoteLogSegmentMetadata,
) -> bool:
    """Whether the segment's last record is the leader's: the leader's epoch of that
    record ends after it (OffsetForLeaderEpoch). Records with the same epoch at the
    same offset are the same record, and so are all before them (KIP-101)."""
    last_epoch = max(filtered_leader_epoch_map(metadata.segment_leader_epochs))
    answers = await leader.fetch_epoch_end_offsets({tp: (current_leader_epoch, last_epoch)})
    answer = answers.get(tp)
    if answer is None:
        raise TierStateMachineError("no OffsetForLeaderEpoch answer")
    _check(answer.error, "offset_for_leader_epoch")
    return answer.leader_epoch == last_epoch and answer.end_offset > metadata.end_offset


async def build_remote_log_aux_state(
    leader: LeaderEndPoint,
    remote: RemoteLogReads | None,
    tp: TopicPartition,
    current_leader_epoch: int,
    partition: Partition,
    executor: concurrent.futures.Executor,
    still_following: Callable[[], bool] = lambda: True,
) -> int:
    """Install the state below the leader's local start (see the module docstring) and
    return the offset to fetch from; the remote reads run in ``executor``.
    TierStateMachineError (or a request error) when it cannot be done now; nothing is
    changed then. ``still_following`` is asked right before anything changes: the
    requests and the remote read above yield the loop, and meanwhile this replica may
    have become the leader (or follow another one), whose log must not be emptied
    (Kafka holds its partitionMapLock throughout)."""
    if remote is None:
        raise TierStateMachineError("the leader tiers this partition but tiering is off here")
    error, local_start, epoch = await leader.fetch_earliest_local_offset(tp, current_leader_epoch)
    _check(error, "list_offsets earliest_local")
    error, log_start = await leader.fetch_earliest_offset(tp, current_leader_epoch)
    _check(error, "list_offsets earliest")
    target = await _target_epoch(leader, tp, current_leader_epoch, local_start, epoch)
    tip = TopicIdPartition(partition.topic_id, tp)
    metadata = find_aux_state_segment(remote.rlmm, tip, target, local_start)
    if metadata is None:
        raise TierStateMachineError(
            f"no remote segment of epoch {target} holds offset {local_start - 1} yet"
        )
    try:
        state = await asyncio.get_running_loop().run_in_executor(
            executor, fetch_remote_log_aux_state, remote.rsm, metadata
        )
    except RemoteStorageError as e:
        raise TierStateMachineError(f"reading the remote aux state: {e}") from e
    if state.next_offset > local_start and not await _on_leader_lineage(
        leader, tp, current_leader_epoch, metadata
    ):
        # The segment goes on past the leader's local start with another leader's
        # records (an unclean election): restart at the leader's local start instead,
        # below which the segment agrees with the leader. Its producer snapshot is the
        # state after those other records: none, as when a segment has none.
        below = tuple(e for e in state.epochs if e.start_offset < local_start)
        state = RemoteLogAuxState(local_start, below, None)
    if state.producer_snapshot is not None:
        try:
            decode_snapshot(state.producer_snapshot)  # before anything changes
        except CorruptSnapshotError as e:
            raise TierStateMachineError(f"the remote producer snapshot: {e}") from e
    if not still_following():
        raise TierStateMachineError("no longer following this leader: nothing installed")
    _install(partition, state, log_start)
    # Durable before the fetcher goes on (Kafka writes the checkpoint synchronously:
    # LeaderEpochFileCache.clearAndFlush when truncating fully, then assign(List)). Left
    # to the log's lazy write, a crash in between loaded a cache without the remote
    # epochs. The write and its fsync run in the log's executor, off the loop.
    await partition.log.flush_epoch_checkpoint()
    return state.next_offset


def _install(partition: Partition, state: RemoteLogAuxState, leader_log_start: int) -> None:
    """Kafka's order: truncate fully, then the epochs, then the producer state. All in
    memory, on the loop, in one go: nothing else sees the log half rebuilt."""
    log_start = min(leader_log_start, state.next_offset)
    partition.truncate_fully_and_start_at(state.next_offset, log_start)
    log = partition.log
    for entry in state.epochs:
        log.maybe_assign_epoch_start_offset(entry.epoch, entry.start_offset)
    if state.producer_snapshot is not None:
        log.producer_state.load_snapshot(
            state.next_offset, state.producer_snapshot, int(time.time() * 1000)
        )
