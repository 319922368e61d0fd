"""Reconciliation: moving a member from its current assignment towards the target one
(Kafka's CurrentAssignmentBuilder), one safe step per heartbeat.

The rules that keep a partition from ever being owned by two members at once:

- A member first gives up what the target takes from it. Until its heartbeat no longer
  lists those partitions as owned it stays in UNREVOKED_PARTITIONS at its current
  epoch; once they are gone it moves to the next epoch.
- A member only receives partitions nobody holds (their partition epoch is -1, which
  the group keeps up to date for assigned and pending-revocation partitions alike).
  Partitions of its target still held by someone else are "unreleased": the member
  moves to the target epoch with what is free and waits in UNRELEASED_PARTITIONS.
- A member whose partitions are all in place is STABLE at the target epoch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

from tiercel.protocol.errors import FencedMemberEpochError
from tiercel.server.coordinator.group.modern.assignment import Assignment
from tiercel.server.coordinator.group.modern.member import ConsumerGroupMember, MemberState

PartitionEpoch = Callable[[uuid.UUID, int], int]
"""The epoch of a partition's current owner, or -1 when nobody holds it."""


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Assignment | None,
) -> ConsumerGroupMember:
    """The member's next state (the same value when it cannot move yet). ``owned`` is
    what its heartbeat says it holds (None when the heartbeat did not say)."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(
            member, member.member_epoch, target_epoch, target, partition_epoch, owned
        )
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.partitions_pending_revocation):
            return member
        return _next_assignment(
            member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned
        )
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(
            member, member.member_epoch, target_epoch, target, partition_epoch, owned
        )
    # A state a newer coordinator wrote: start over from nothing.
    if owned is None or owned:
        raise FencedMemberEpochError(
            "the member is in an unknown state; it must abandon its partitions and rejoin"
        )
    return _next_assignment(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still holds any of ``partitions`` (unknown counts as yes)."""
    if owned is None:
        return True
    return any(
        owned_partitions & partitions.get(t, frozenset()) for t, owned_partitions in owned.items()
    )


def _next_assignment(
    member: ConsumerGroupMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Assignment | None,
) -> ConsumerGroupMember:
    kept: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    receiving: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    current = member.assigned_partitions
    for topic_id in target.keys() | current.keys():
        wanted = target.get(topic_id, frozenset())
        held = current.get(topic_id, frozenset())
        keep = held & wanted
        free = frozenset(p for p in wanted - keep if partition_epoch(topic_id, p) == -1)
        unreleased = unreleased or len(free) < len(wanted - keep)
        if keep:
            kept[topic_id] = keep
        if held - keep:
            revoking[topic_id] = held - keep
        if free:
            receiving[topic_id] = free
    if revoking and _owns_any(owned, revoking):
        return replace(
            member.with_epoch(epoch),
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned_partitions=kept,
            partitions_pending_revocation=revoking,
        )
    assigned = {
        t: kept.get(t, frozenset()) | receiving.get(t, frozenset())
        for t in kept.keys() | receiving.keys()
    }
    return replace(
        member.with_epoch(target_epoch),
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        assigned_partitions=assigned,
        partitions_pending_revocation={},
    )
