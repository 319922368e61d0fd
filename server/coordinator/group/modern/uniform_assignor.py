"""The "uniform" server-side assignor (Kafka's UniformAssignor): balance first, then
stickiness.

Homogeneous groups (every member subscribes to the same topics): every member gets
``total // members`` partitions or one more, and the members that already hold the most
are the ones that keep the extra one; each member keeps as many of its current
partitions as its quota allows, and only the rest moves. So a member either keeps all
it had and gains, or loses some and gains nothing.

Heterogeneous groups: each member keeps the current partitions it still subscribes to;
the others go, topic by topic (topics with fewer subscribers first), to the subscriber
holding the fewest partitions; then a partition moves from a member to a subscriber of
its topic holding at least two fewer, until no such move is left. Each move lowers the
sum of squared member sizes, so this ends; at the end no partition could move to make
two members that may both own it closer in size.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping
from itertools import islice
from typing import Final

from tiercel.server.coordinator.group.modern.assignment import Assignment, assignment_of, pairs
from tiercel.server.coordinator.group.modern.assignor import GroupSpec

UNIFORM_ASSIGNOR_NAME: Final = "uniform"

_Partition = tuple[uuid.UUID, int]


class UniformAssignor:
    """Stateless; any thread."""

    name: Final = UNIFORM_ASSIGNOR_NAME

    def assign(
        self, group: GroupSpec, partition_counts: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]:
        if not group.members:
            return {}
        if group.homogeneous:
            return _assign_homogeneous(group, partition_counts)
        return _assign_heterogeneous(group, partition_counts)


def _current(
    group: GroupSpec, member_ids: list[str], partition_counts: Mapping[uuid.UUID, int]
) -> dict[str, list[_Partition]]:
    """Each member's current partitions that it may keep: of topics it subscribes to,
    still existing, and not claimed by a member before it (a corrupt input)."""
    claimed: set[_Partition] = set()
    current: dict[str, list[_Partition]] = {}
    for member_id in member_ids:
        member = group.members[member_id]
        valid = sorted(
            (t, p)
            for t, p in pairs(member.assignment)
            if t in member.topic_ids and p < partition_counts[t] and (t, p) not in claimed
        )
        claimed.update(valid)
        current[member_id] = valid
    return current


def _assign_homogeneous(
    group: GroupSpec, partition_counts: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    member_ids = sorted(group.members)
    topics = sorted(group.members[member_ids[0]].topic_ids, key=lambda t: t.bytes)
    current = _current(group, member_ids, partition_counts)
    total = sum(partition_counts[t] for t in topics)
    minimum, extra = divmod(total, len(member_ids))
    by_holding = sorted(member_ids, key=lambda m: (-len(current[m]), m))
    quota = {m: minimum + (1 if i < extra else 0) for i, m in enumerate(by_holding)}
    result = {m: current[m][: quota[m]] for m in member_ids}
    kept = {tp for partitions in result.values() for tp in partitions}
    free = iter([(t, p) for t in topics for p in range(partition_counts[t]) if (t, p) not in kept])
    for member_id in member_ids:
        result[member_id].extend(islice(free, quota[member_id] - len(result[member_id])))
    return {m: assignment_of(partitions) for m, partitions in result.items()}


def _assign_heterogeneous(
    group: GroupSpec, partition_counts: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    member_ids = sorted(group.members)
    subscribers: dict[uuid.UUID, list[str]] = {}
    for member_id in member_ids:
        for topic_id in group.members[member_id].topic_ids:
            subscribers.setdefault(topic_id, []).append(member_id)
    owned = {
        m: set(partitions)
        for m, partitions in _current(group, member_ids, partition_counts).items()
    }
    kept = {tp for partitions in owned.values() for tp in partitions}
    free = sorted(
        ((t, p) for t in subscribers for p in range(partition_counts[t]) if (t, p) not in kept),
        key=lambda tp: (len(subscribers[tp[0]]), tp[0].bytes, tp[1]),
    )
    # The smallest subscriber of each topic, from a heap per topic whose entries may be
    # stale (the member got partitions of other topics since): refreshed when on top.
    heaps = {t: [(len(owned[m]), m) for m in members] for t, members in subscribers.items()}
    for heap in heaps.values():
        heapq.heapify(heap)
    for topic_id, partition in free:
        heap = heaps[topic_id]
        while heap[0][0] != len(owned[heap[0][1]]):
            heapq.heapreplace(heap, (len(owned[heap[0][1]]), heap[0][1]))
        count, receiver = heap[0]
        owned[receiver].add((topic_id, partition))
        heapq.heapreplace(heap, (count + 1, receiver))
    while _move_one(owned, subscribers):
        pass
    return {m: assignment_of(partitions) for m, partitions in owned.items()}


def _move_one(
    owned: dict[str, set[_Partition]], subscribers: Mapping[uuid.UUID, list[str]]
) -> bool:
    """Move one partition from the largest member that has a subscriber of one of its
    topics at least two partitions smaller; False when there is none."""
    # Sizes only change with a move, which ends the pass: the smallest subscriber of
    # each topic is computed once.
    smallest = {
        t: min(members, key=lambda m: (len(owned[m]), m)) for t, members in subscribers.items()
    }
    for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
        for topic_id in sorted({t for t, _ in owned[giver]}, key=lambda t: t.bytes):
            receiver = smallest[topic_id]
            if len(owned[giver]) - len(owned[receiver]) > 1:
                moved = max(tp for tp in owned[giver] if tp[0] == topic_id)
                owned[giver].remove(moved)
                owned[receiver].add(moved)
                return True
    return False
