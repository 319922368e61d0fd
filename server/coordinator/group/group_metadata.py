"""GroupMetadata: a classic group's membership and state machine (Kafka's GroupMetadata).

States and their transitions (a transition from any other state is a bug):

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                 ▲      │                                      │
      │                 │      └──no member left──▶ Empty             │ leader's SyncGroup
      │                 └──join, leave, expiry───── Stable ◀──────────┘ stored
      └──────────────────────────────────────────────────────────────────────────────
    any state ──partition unloaded, group deleted or expired──▶ Dead (final)

The coordinator drives the transitions; this class keeps the bookkeeping consistent:
members and their protocols, static members (group.instance.id → member id), pending
members (KIP-394: member id handed out, second JoinGroup not seen yet), members that
still owe a SyncGroup, the leader, and the protocol all members support.

Offsets are not kept here but in the OffsetStore, shared by every group type; a group
type only says how its offsets expire. KIP-848 consumer groups (`modern.consumer_group`)
are the second type, with the same ``group_id``/``group_type``/``state_name``/
``offset_expiration``/``overview`` surface.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.coordinator.group.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    subscribed_topics,
)
from tiercel.server.coordinator.group.group_results import (
    GroupOverview,
    GroupSummary,
    JoinCallback,
    JoinGroupResponseMember,
    JoinGroupResult,
    SyncGroupResult,
)
from tiercel.server.coordinator.group.member_metadata import MemberMetadata, Protocols
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata

Clock = Callable[[], int]


class GroupType(StrEnum):
    """Kafka's Group.GroupType names, as ListGroups reports them."""

    CLASSIC = "classic"
    CONSUMER = "consumer"


class GroupState(Enum):
    """Kafka's classic group states; the value is the name clients see."""

    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    EMPTY = "Empty"


_VALID_PREVIOUS_STATES: Final = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


@dataclass(frozen=True, slots=True)
class OffsetExpiration:
    """How a group's offsets expire now: age is measured from ``base(offset)``, and
    offsets of ``excluded_topics`` (still being consumed) never expire."""

    base: Callable[[OffsetAndMetadata], int]
    excluded_topics: frozenset[str] = frozenset()


def _commit_timestamp(offset: OffsetAndMetadata) -> int:
    return offset.commit_timestamp_ms


class GroupMetadata:
    """One classic group.

    Invariants: every member's protocol type is ``protocol_type``; ``leader_id`` names a
    member (or is None when there are none); ``static_members`` maps each static member's
    instance id to its current member id; ``num_members_awaiting_join`` counts members
    with a parked JoinGroup; ``supported_protocols`` counts, per protocol name, the
    members supporting it; pending members are never members; pending-sync members are.
    ``delayed_join``/``delayed_sync`` are the group's rebalance and sync timers, owned by
    the coordinator.

    Event-loop only.
    """

    group_type: Final = GroupType.CLASSIC

    def __init__(self, group_id: str, state: GroupState, clock: Clock) -> None:
        self.group_id = group_id
        self.state = state
        self._clock = clock
        self.current_state_timestamp: int | None = clock()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_members_awaiting_join = 0
        self._supported_protocols: Counter[str] = Counter()
        self.subscribed_topics: frozenset[str] | None = None
        # A member joined during the initial rebalance delay: wait a little longer.
        self.new_member_added = False
        self.delayed_join: asyncio.TimerHandle | None = None
        # The delayed join is the initial delay of a group leaving Empty (which only its
        # timer ends), not a rebalance timeout (which ends when all members rejoined).
        self.delayed_join_initial = False
        self.delayed_sync: asyncio.TimerHandle | None = None
        self.pending_member_timers: dict[str, asyncio.TimerHandle] = {}

    # -- queries ----------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    @property
    def state_name(self) -> str:
        return self.state.value

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    @property
    def current_state_timestamp_or_default(self) -> int:
        return -1 if self.current_state_timestamp is None else self.current_state_timestamp

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    @property
    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    @property
    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @property
    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def is_in_states(self, states: Collection[str]) -> bool:
        """ListGroups' state filter, compared in lower case."""
        return self.state.value.lower() in states

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """True when unknown, so that OffsetDelete errs on the safe side."""
        return self.subscribed_topics is None or topic in self.subscribed_topics

    def supports_protocols(self, member_protocol_type: str, protocols: frozenset[str]) -> bool:
        if self.is_(GroupState.EMPTY):
            return bool(member_protocol_type) and bool(protocols)
        return self.protocol_type == member_protocol_type and any(
            self._supported_protocols[p] == len(self.members) for p in protocols
        )

    def select_protocol(self) -> str:
        """The protocol every member supports that gets the most votes (each member votes
        for its most preferred candidate); ties go to the earliest-joined member's vote."""
        if not self.members:
            raise RuntimeError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = frozenset(
            p for p, count in self._supported_protocols.items() if count == len(self.members)
        )
        votes = Counter(member.vote(candidates) for member in self.members.values())
        return max(votes, key=lambda p: votes[p])

    # -- members ----------------------------------------------------------------------

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        prefix = client_id if group_instance_id is None else group_instance_id
        return f"{prefix}-{uuid.uuid4()}"

    def add(self, member: MemberMetadata, callback: JoinCallback | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(
                    f"static member {member.group_instance_id} is already in {self.group_id}"
                )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type or not self.supports_protocols(
            member.protocol_type, member.protocol_names
        ):
            raise RuntimeError(f"{member} does not fit the protocols of group {self.group_id}")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._supported_protocols.update(member.protocol_names)
        member.awaiting_join_callback = callback
        if callback is not None:
            self.num_members_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._supported_protocols.subtract(member.protocol_names)
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
            member.cancel_heartbeat()
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(
        self,
        member: MemberMetadata,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> None:
        self._supported_protocols.subtract(member.protocol_names)
        member.supported_protocols = protocols
        self._supported_protocols.update(member.protocol_names)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.awaiting_join_callback = callback

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else make any rejoined member leader; False
        when the group has no leader or nobody rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> MemberMetadata:
        """KIP-345: give a static member a new member id; a JoinGroup or SyncGroup the old
        id still has parked is fenced at once."""
        member = self.members.pop(old_member_id, None)
        if member is None:
            raise RuntimeError(f"cannot replace unknown member {old_member_id}")
        self.maybe_invoke_join_callback(
            member, JoinGroupResult(old_member_id, ErrorCode.fenced_instance_id)
        )
        self.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.fenced_instance_id))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self.members:
            raise RuntimeError(f"{member_id} is already a member of {self.group_id}")
        self.pending_members.add(member_id)

    def add_pending_sync_member(self, member_id: str) -> None:
        if member_id not in self.members:
            raise RuntimeError(f"{member_id} is not a member of {self.group_id}")
        self.pending_sync_members.add(member_id)

    # -- callbacks --------------------------------------------------------------------

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinGroupResult) -> None:
        callback = member.awaiting_join_callback
        if callback is not None:
            member.awaiting_join_callback = None
            self.num_members_awaiting_join -= 1
            callback(result)

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        """True if the member was waiting for its assignment."""
        callback = member.awaiting_sync_callback
        if callback is None:
            return False
        member.awaiting_sync_callback = None
        callback(result)
        return True

    # -- state ------------------------------------------------------------------------

    def transition_to(self, state: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS_STATES[state]:
            raise RuntimeError(
                f"group {self.group_id} cannot move from {self.state.value} to {state.value}"
            )
        self.state = state
        self.current_state_timestamp = self._clock()

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members.clear()

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """The union of the members' subscriptions for a consumer group; None when the
        group is not a consumer group or a subscription does not parse."""
        if not self.is_consumer_group:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            member_topics = subscribed_topics(member.metadata(self.protocol_name))
            if member_topics is None:
                return None
            topics |= member_topics
        return frozenset(topics)

    def current_member_metadata(self) -> tuple[JoinGroupResponseMember, ...]:
        """What the leader gets in its JoinGroup response."""
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE) or (
            self.protocol_name is None
        ):
            raise RuntimeError(f"no member metadata for group {self.group_id} in {self.state}")
        protocol = self.protocol_name
        return tuple(
            JoinGroupResponseMember(member_id, m.group_instance_id, m.metadata(protocol))
            for member_id, m in self.members.items()
        )

    def summary(self) -> GroupSummary:
        protocol_type = self.protocol_type or ""
        if self.is_(GroupState.STABLE) and self.protocol_name is not None:
            protocol = self.protocol_name
            members = tuple(m.summary(protocol) for m in self.members.values())
            return GroupSummary(self.state_name, protocol_type, protocol, members)
        members = tuple(m.summary_no_metadata() for m in self.members.values())
        return GroupSummary(self.state_name, protocol_type, "", members)

    def overview(self) -> GroupOverview:
        return GroupOverview(
            self.group_id, self.protocol_type or "", self.state_name, self.group_type.value
        )

    def offset_expiration(self) -> OffsetExpiration | None:
        """Kafka's rules: an Empty group's offsets age from when it became empty; a
        Stable consumer group's offsets of topics nobody subscribes to age from their
        commit; a group used only for offset storage (no protocol type) likewise;
        otherwise nothing expires."""
        if self.protocol_type is not None and self.is_(GroupState.EMPTY):
            emptied_at = self.current_state_timestamp
            if emptied_at is None:
                return OffsetExpiration(_commit_timestamp)
            return OffsetExpiration(lambda _offset: emptied_at)
        if (
            self.is_consumer_group
            and self.subscribed_topics is not None
            and self.is_(GroupState.STABLE)
        ):
            return OffsetExpiration(_commit_timestamp, self.subscribed_topics)
        if self.protocol_type is None:
            return OffsetExpiration(_commit_timestamp)
        return None

    def cancel_timers(self) -> None:
        for timer in (self.delayed_join, self.delayed_sync, *self.pending_member_timers.values()):
            if timer is not None:
                timer.cancel()
        self.delayed_join = self.delayed_sync = None
        self.pending_member_timers.clear()
        for member in self.members.values():
            member.cancel_heartbeat()

    def __repr__(self) -> str:
        return (
            f"GroupMetadata(group_id={self.group_id}, generation={self.generation_id}, "
            f"protocol_type={self.protocol_type}, state={self.state.value}, "
            f"members={list(self.members)})"
        )


def load_group(
    group_id: str,
    generation_id: int,
    protocol_type: str,
    protocol_name: str | None,
    leader_id: str | None,
    current_state_timestamp: int | None,
    members: Iterable[MemberMetadata],
    clock: Clock,
) -> GroupMetadata:
    """A group as read back from __consumer_offsets: Stable with its members, or Empty."""
    loaded = list(members)
    group = GroupMetadata(group_id, GroupState.STABLE if loaded else GroupState.EMPTY, clock)
    group.generation_id = generation_id
    group.protocol_type = protocol_type or None
    group.protocol_name = protocol_name
    group.leader_id = leader_id
    group.current_state_timestamp = current_state_timestamp
    for member in loaded:
        group.add(member)
    group.subscribed_topics = group.compute_subscribed_topics()
    return group
