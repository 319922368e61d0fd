"""Leader elections and ISR removals as pure functions of a partition's state.

Kafka's ZooKeeper-mode PartitionLeaderElectionAlgorithms and the controller's
removeReplicasFromIsr. Each function returns the partition's next state, with the leader
epoch bumped (every state the controller writes carries a new leader epoch, as Kafka's
LeaderAndIsr.newLeaderAndIsr does), or None when there is nothing to write: no eligible
leader, or no change. `assignment` is the partition's replicas in preference order; the
caller records the controller epoch and the znode version when it writes the result.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace

from tiercel.server.partition import PartitionState

NO_LEADER = -1


def _next(state: PartitionState, leader: int, isr: tuple[int, ...]) -> PartitionState:
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr)


def elect_offline(
    state: PartitionState,
    assignment: tuple[int, ...],
    live: Collection[int],
    unclean: bool,
) -> PartitionState | None:
    """A partition whose leader is gone: the first live ISR member in assignment order,
    ISR shrunk to its live members; failing that, when unclean election is allowed, the
    first live replica, alone in the ISR."""
    for replica in assignment:
        if replica in live and replica in state.isr:
            return _next(state, replica, tuple(r for r in state.isr if r in live))
    if unclean:
        for replica in assignment:
            if replica in live:
                return _next(state, replica, (replica,))
    return None


def elect_reassigned(
    state: PartitionState, target: tuple[int, ...], live: Collection[int]
) -> PartitionState | None:
    """A reassignment dropping the leader: the first live ISR member of the target."""
    for replica in target:
        if replica in live and replica in state.isr:
            return _next(state, replica, state.isr)
    return None


def elect_preferred(
    state: PartitionState, assignment: tuple[int, ...], live: Collection[int]
) -> PartitionState | None:
    """Leadership back to the first replica, if it is live and in the ISR."""
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred in live and preferred in state.isr:
        return _next(state, preferred, state.isr)
    return None


def elect_controlled_shutdown(
    state: PartitionState,
    assignment: tuple[int, ...],
    live_or_shutting_down: Collection[int],
    shutting_down: Collection[int],
) -> PartitionState | None:
    """Leadership off brokers that are shutting down, to the first ISR member that is
    not; they also leave the ISR."""
    for replica in assignment:
        if (
            replica in live_or_shutting_down
            and replica in state.isr
            and replica not in shutting_down
        ):
            isr = tuple(r for r in state.isr if r not in shutting_down)
            return _next(state, replica, isr)
    return None


def remove_replicas_from_isr(
    state: PartitionState, replicas: Iterable[int]
) -> PartitionState | None:
    """The replicas leave the ISR one by one, as Kafka's OfflineReplica transition does:
    a leaving leader leaves the partition leaderless, and the last ISR member stays (so
    that the partition can only come back with it, unless unclean election is allowed)."""
    leader, isr = state.leader, state.isr
    for replica in replicas:
        if replica not in isr:
            continue
        if replica == leader:
            leader = NO_LEADER
        if len(isr) > 1:
            isr = tuple(r for r in isr if r != replica)
    if (leader, isr) == (state.leader, state.isr):
        return None
    return _next(state, leader, isr)


def bump_leader_epoch(state: PartitionState) -> PartitionState:
    """Same leader and ISR, new epoch: how Kafka's controller makes every replica pick up
    a changed replica set during a reassignment."""
    return _next(state, state.leader, state.isr)
