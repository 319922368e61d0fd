"""Reconciliation of consumer group members (KIP-848): partitions are revoked before they
are reassigned, a partition is never owned by two members at once, and a group of
members that keep heartbeating converges to its target assignment.

The simulation drives the heartbeat planner and the group's record replay directly (no
log), with clients that acknowledge what they are told only some heartbeats later.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.protocol.errors import FencedMemberEpochError
from tiercel.server.coordinator.group.coordinator_records import GroupMetadataKey
from tiercel.server.coordinator.group.modern.assignment import Assignment, pairs
from tiercel.server.coordinator.group.modern.consumer_group import ConsumerGroup, ConsumerGroupState
from tiercel.server.coordinator.group.modern.heartbeat import GroupChange, HeartbeatPlanner
from tiercel.server.coordinator.group.modern.heartbeat_request import HeartbeatRequest
from tiercel.server.coordinator.group.modern.member import ConsumerGroupMember, MemberState
from tiercel.server.coordinator.group.modern.range_assignor import RangeAssignor
from tiercel.server.coordinator.group.modern.reconciliation import reconcile
from tiercel.server.coordinator.group.modern.uniform_assignor import UniformAssignor
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata

T = uuid.UUID(int=7)
NOW = 1_700_000_000_000


def free(_topic: uuid.UUID, _partition: int) -> int:
    return -1


def member(
    epoch: int,
    assigned: set[int],
    state: MemberState = MemberState.STABLE,
    pending: frozenset[int] = frozenset(),
) -> ConsumerGroupMember:
    return ConsumerGroupMember(
        "m",
        member_epoch=epoch,
        previous_member_epoch=epoch - 1,
        state=state,
        assigned_partitions={T: frozenset(assigned)} if assigned else {},
        partitions_pending_revocation={T: frozenset(pending)} if pending else {},
    )


def parts(assignment: Assignment) -> set[int]:
    return set(assignment.get(T, ()))


# -- one step at a time ---------------------------------------------------------------------


def test_a_reconciled_member_stays_as_it_is() -> None:
    m = member(3, {0, 1})
    assert reconcile(m, 3, {T: frozenset({0, 1})}, free, {T: frozenset({0, 1})}) is m


def test_partitions_are_revoked_before_anything_new_is_assigned() -> None:
    m = member(3, {0, 1, 2})
    step = reconcile(m, 4, {T: frozenset({0, 5})}, free, {T: frozenset({0, 1, 2})})
    assert step.state is MemberState.UNREVOKED_PARTITIONS
    assert step.member_epoch == 3  # it keeps its epoch until it has revoked
    assert parts(step.assigned_partitions) == {0}
    assert parts(step.partitions_pending_revocation) == {1, 2}
    # Still owning one of them: no progress.
    assert reconcile(step, 4, {T: frozenset({0, 5})}, free, {T: frozenset({0, 2})}) is step
    # Revoked: the next epoch, and the free partition.
    done = reconcile(step, 4, {T: frozenset({0, 5})}, free, {T: frozenset({0})})
    assert (done.state, done.member_epoch, done.previous_member_epoch) == (MemberState.STABLE, 4, 3)
    assert parts(done.assigned_partitions) == {0, 5}
    assert done.partitions_pending_revocation == {}


def test_a_partition_still_held_elsewhere_is_unreleased() -> None:
    m = member(3, {0})

    def held(topic: uuid.UUID, partition: int) -> int:
        return 3 if partition == 1 else -1

    step = reconcile(m, 4, {T: frozenset({0, 1, 2})}, held, {T: frozenset({0})})
    assert step.state is MemberState.UNRELEASED_PARTITIONS
    assert (step.member_epoch, parts(step.assigned_partitions)) == (4, {0, 2})
    done = reconcile(step, 4, {T: frozenset({0, 1, 2})}, free, {T: frozenset({0, 2})})
    assert (done.state, parts(done.assigned_partitions)) == (MemberState.STABLE, {0, 1, 2})


def test_partitions_already_gone_from_the_heartbeat_are_released_at_once() -> None:
    step = reconcile(member(3, {0, 1}), 4, {T: frozenset({0})}, free, {T: frozenset({0})})
    assert (step.state, step.member_epoch, parts(step.assigned_partitions)) == (
        MemberState.STABLE,
        4,
        {0},
    )


def test_an_unknown_state_fences_a_member_that_owns_partitions() -> None:
    m = member(3, {0}, state=MemberState.UNKNOWN)
    with pytest.raises(FencedMemberEpochError):
        reconcile(m, 4, {T: frozenset({0})}, free, {T: frozenset({0})})
    fresh = reconcile(m, 4, {T: frozenset({0})}, free, {})
    assert fresh.member_epoch == 4


# -- a group of clients --------------------------------------------------------------------


@dataclass
class Client:
    """What a client believes: its epoch, what it consumes, and the latest assignment
    it was told and has not acted on yet."""

    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    told: Assignment | None = None


class Simulation:
    def __init__(self, partitions: int, assignor: str) -> None:
        self.cache = MetadataCache(1, "cluster")
        self.partitions = partitions
        self._put_topic()
        assignors = {"uniform": UniformAssignor(), "range": RangeAssignor()}
        self.planner = HeartbeatPlanner(self.cache, {assignor: assignors[assignor]}, 1000, 100)
        self.group: ConsumerGroup | None = None
        self.clients: dict[str, Client] = {}
        self.joined = 0

    def _put_topic(self) -> None:
        self.cache.put_topic(TopicMetadata("t", T, {p: (1,) for p in range(self.partitions)}))

    def apply(self, change: GroupChange) -> None:
        if change.created:
            self.group = change.group
        for key, value in change.records:
            if not isinstance(key, GroupMetadataKey):
                change.group.replay(key, value)

    def join(self) -> None:
        member_id = f"m{self.joined}"
        self.joined += 1
        self.clients[member_id] = Client()
        self.heartbeat(member_id, act=False)

    def heartbeat(self, member_id: str, act: bool) -> None:
        client = self.clients[member_id]
        if act and client.told is not None:
            # The client stops consuming what it lost and starts what it was given.
            client.owned = dict(client.told)
            client.told = None
        joining = client.epoch == 0
        request = HeartbeatRequest(
            "g",
            member_id,
            client.epoch,
            rebalance_timeout_ms=1000 if joining else -1,
            subscribed_topic_names=("t",) if joining else None,
            owned_partitions={} if joining else dict(client.owned),
        )
        change = self.planner.heartbeat(self.group, request, NOW)
        self.apply(change)
        assert change.result is not None
        client.epoch = change.result.member_epoch
        if change.result.assignment is not None:
            client.told = change.result.assignment
            # Revoking is immediate in the client's mind only once it acts; but it
            # never starts consuming a partition before acting.

    def leave(self, member_id: str) -> None:
        client = self.clients.pop(member_id)
        assert self.group is not None
        change = self.planner.leave(self.group, HeartbeatRequest("g", member_id, -1))
        self.apply(change)
        client.owned.clear()

    def expire(self, member_id: str) -> None:
        """The client died; its session ran out."""
        assert self.group is not None
        self.clients.pop(member_id)
        m = self.group.members[member_id]
        self.apply(GroupChange(self.group, self.planner.fence(self.group, m)))

    def grow(self) -> None:
        self.partitions += 1
        self._put_topic()

    def check(self) -> None:
        """Nobody consumes a partition another member consumes, and the coordinator
        counts every consumed partition as the consumer's (assigned or being revoked)."""
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for member_id, client in self.clients.items():
            for tp in pairs(client.owned):
                assert tp not in seen, f"{tp} consumed by {seen[tp]} and {member_id}"
                seen[tp] = member_id
            if self.group is not None and member_id in self.group.members:
                m = self.group.members[member_id]
                held = set(pairs(m.assigned_partitions)) | set(
                    pairs(m.partitions_pending_revocation)
                )
                assert set(pairs(client.owned)) <= held, (member_id, client.owned, m)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 12),
    st.sampled_from(["uniform", "range"]),
    st.lists(
        st.tuples(
            st.sampled_from(["join", "beat", "beat", "beat", "leave", "expire", "grow"]),
            st.integers(0, 9),
            st.booleans(),
        ),
        max_size=40,
    ),
)
def test_no_partition_is_ever_consumed_twice_and_the_group_converges(
    partitions: int, assignor: str, operations: list[tuple[str, int, bool]]
) -> None:
    sim = Simulation(partitions, assignor)
    sim.join()
    for op, pick, act in operations:
        members = sorted(sim.clients)
        if op == "join" and len(members) < 5:
            sim.join()
        elif op == "grow" and sim.partitions < 16:
            sim.grow()
        elif members and op in ("leave", "expire"):
            (sim.leave if op == "leave" else sim.expire)(members[pick % len(members)])
        elif members:
            sim.heartbeat(members[pick % len(members)], act)
        sim.check()
    if not sim.clients:
        return
    # Everybody keeps heartbeating and acting on what it is told: the group settles.
    for _ in range(8):
        for member_id in sorted(sim.clients):
            sim.heartbeat(member_id, act=True)
            sim.check()
    group = sim.group
    assert group is not None
    assert group.state is ConsumerGroupState.STABLE, group
    owned = {tp for c in sim.clients.values() for tp in pairs(c.owned)}
    assert owned == {(T, p) for p in range(sim.partitions)}
    for member_id, client in sim.clients.items():
        assert client.owned == dict(group.target_assignment.get(member_id, {}))
        assert client.epoch == group.group_epoch
