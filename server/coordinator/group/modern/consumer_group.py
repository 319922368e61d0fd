"""ConsumerGroup: a KIP-848 consumer group, rebuilt from and kept by its records.

Every change to a consumer group is a list of __consumer_offsets records; once they are
written, `replay` applies them, record by record, exactly as loading the partition does
after a restart. So what a coordinator holds in memory is always what its log says.

States (Kafka's ConsumerGroupState), derived after every record:

    Empty        no members
    Assigning    the group epoch is ahead of the target assignment epoch
    Reconciling  some member is not yet STABLE at the target assignment epoch
    Stable       every member is
    Dead         removed (deleted, or its partition unloaded); final

The group epoch grows whenever what the assignment depends on changes (members and
their subscriptions, the partition counts of subscribed topics); the target assignment
is recomputed for a new group epoch and carries it as its own epoch; members then
reconcile towards it, each with its own member epoch.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Final

from tiercel.server.coordinator.group.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    TopicMetadataValue,
)
from tiercel.server.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from tiercel.server.coordinator.group.group_metadata import GroupType, OffsetExpiration
from tiercel.server.coordinator.group.group_results import GroupOverview
from tiercel.server.coordinator.group.modern.assignment import (
    EMPTY_ASSIGNMENT,
    Assignment,
    from_values,
    pairs,
)
from tiercel.server.coordinator.group.modern.member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerGroupMember,
    MemberState,
)
from tiercel.server.coordinator.group.modern.regex import ResolvedRegularExpression
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata

# Kafka's "no target assignment" epoch, after the target assignment's tombstone.
NO_ASSIGNMENT_EPOCH: Final = -1


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def _commit_timestamp(offset: OffsetAndMetadata) -> int:
    return offset.commit_timestamp_ms


class ConsumerGroup:
    """Invariants: every partition is held (assigned or pending revocation) by at most
    one member, and ``_partition_epochs`` maps it to that member's epoch; the counters
    count the members' subscribed names, regular expressions and preferred assignors;
    ``static_members`` maps each static member's instance id to its member id; the state
    is derived from the rest after every record. ``session_timers`` and
    ``rebalance_timers`` belong to the coordinator; ``pending_writes`` counts its
    writes in flight (a group with one is never deleted).

    Event-loop only.
    """

    group_type: Final = GroupType.CONSUMER
    protocol_type: Final = CONSUMER_PROTOCOL_TYPE

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = ConsumerGroupState.EMPTY
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.target_assignment: dict[str, Assignment] = {}
        self.subscription_metadata: dict[str, TopicMetadataValue] = {}
        self.resolved_regexes: dict[str, ResolvedRegularExpression] = {}
        # The newest resolution replayed: when, and against which topic-names version
        # of this broker's metadata (-1 after a load: another process's numbering).
        self.last_regex_refresh_ms = -1
        self.regex_version = -1
        self.session_timers: dict[str, asyncio.TimerHandle] = {}
        self.rebalance_timers: dict[str, asyncio.TimerHandle] = {}
        self.pending_writes = 0
        self._topic_subscribers: Counter[str] = Counter()
        self._regex_subscribers: Counter[str] = Counter()
        self._server_assignors: Counter[str] = Counter()
        self._partition_epochs: dict[uuid.UUID, dict[int, int]] = {}

    # -- queries ----------------------------------------------------------------------

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def is_empty(self) -> bool:
        return self.state is ConsumerGroupState.EMPTY

    @property
    def is_dead(self) -> bool:
        return self.state is ConsumerGroupState.DEAD

    def is_in_states(self, states: Iterable[str]) -> bool:
        """``states`` in lower case, as ListGroups compares them."""
        return self.state.value.lower() in states

    def overview(self) -> GroupOverview:
        return GroupOverview(
            self.group_id, CONSUMER_PROTOCOL_TYPE, self.state_name, self.group_type.value
        )

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members[member_id]

    def regex_subscribers(self, regex: str) -> int:
        return self._regex_subscribers[regex]

    @property
    def subscribed_regexes(self) -> Mapping[str, int]:
        return self._regex_subscribers

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self._partition_epochs.get(topic_id, {}).get(partition, -1)

    def target_assignment_for(self, member_id: str, instance_id: str | None) -> Assignment:
        """A member's target; a static member's is the one of its instance id's holder."""
        if instance_id is not None:
            holder = self.static_members.get(instance_id)
            if holder is None:
                return EMPTY_ASSIGNMENT
            member_id = holder
        return self.target_assignment.get(member_id, EMPTY_ASSIGNMENT)

    def member_topics(
        self,
        member: ConsumerGroupMember,
        resolved: Mapping[str, ResolvedRegularExpression] | None = None,
    ) -> frozenset[str]:
        """The topics a member subscribes to: its names and what its regex matched."""
        regexes = self.resolved_regexes if resolved is None else resolved
        regex = member.subscribed_topic_regex
        if regex is None or regex not in regexes:
            return member.subscribed_topic_names
        return member.subscribed_topic_names | regexes[regex].topics

    def subscribed_topics(
        self,
        removed: ConsumerGroupMember | None = None,
        added: ConsumerGroupMember | None = None,
        resolved: Mapping[str, ResolvedRegularExpression] | None = None,
    ) -> set[str]:
        """The group's subscribed topics, with ``removed`` (a current member) replaced
        by ``added`` and regular expressions resolved as ``resolved`` says."""
        names = Counter(self._topic_subscribers)
        regexes = Counter(self._regex_subscribers)
        for member, sign in ((removed, -1), (added, 1)):
            if member is not None:
                names.update(dict.fromkeys(member.subscribed_topic_names, sign))
                if member.subscribed_topic_regex is not None:
                    regexes[member.subscribed_topic_regex] += sign
        resolutions = self.resolved_regexes if resolved is None else resolved
        topics = {name for name, count in names.items() if count > 0}
        for regex, count in regexes.items():
            if count > 0 and regex in resolutions:
                topics |= resolutions[regex].topics
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscribed_topics()

    def preferred_server_assignor(
        self, removed: ConsumerGroupMember | None = None, added: ConsumerGroupMember | None = None
    ) -> str | None:
        """The assignor most members ask for (ties: the first name), counting ``added``
        instead of ``removed``; None when nobody asks."""
        counts = Counter(self._server_assignors)
        if removed is not None and removed.server_assignor is not None:
            counts[removed.server_assignor] -= 1
        if added is not None and added.server_assignor is not None:
            counts[added.server_assignor] += 1
        best = sorted((-n, name) for name, n in counts.items() if n > 0)
        return best[0][1] if best else None

    def offset_expiration(self) -> OffsetExpiration:
        """Kafka's rule for consumer groups: offsets age from their commit, and those of
        topics the group subscribes to do not expire."""
        return OffsetExpiration(_commit_timestamp, frozenset(self.subscribed_topics()))

    def tombstone_keys(self) -> list[ConsumerGroupKey]:
        """The keys whose tombstones delete the group, in Kafka's order."""
        group_id = self.group_id
        keys: list[ConsumerGroupKey] = [
            ConsumerGroupCurrentMemberAssignmentKey(group_id, m) for m in self.members
        ]
        keys += [ConsumerGroupTargetAssignmentMemberKey(group_id, m) for m in self.members]
        keys.append(ConsumerGroupTargetAssignmentMetadataKey(group_id))
        keys += [ConsumerGroupMemberMetadataKey(group_id, m) for m in self.members]
        keys += [ConsumerGroupRegularExpressionKey(group_id, r) for r in self.resolved_regexes]
        keys.append(ConsumerGroupPartitionMetadataKey(group_id))
        keys.append(ConsumerGroupMetadataKey(group_id))
        return keys

    # -- records ----------------------------------------------------------------------

    def replay(self, key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> None:
        """Apply one written (or loaded) record; a tombstone of the group epoch kills it."""
        if isinstance(key, ConsumerGroupMetadataKey):
            if isinstance(value, ConsumerGroupMetadataValue):
                self.group_epoch = value.epoch
            else:
                self.state = ConsumerGroupState.DEAD
                self.cancel_timers()
                return
        elif isinstance(key, ConsumerGroupPartitionMetadataKey):
            topics = value.topics if isinstance(value, ConsumerGroupPartitionMetadataValue) else ()
            self.subscription_metadata = {t.topic_name: t for t in topics}
        elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
            self.assignment_epoch = (
                value.assignment_epoch
                if isinstance(value, ConsumerGroupTargetAssignmentMetadataValue)
                else NO_ASSIGNMENT_EPOCH
            )
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            if isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
                self.target_assignment[key.member_id] = from_values(value.topic_partitions)
            else:
                self.target_assignment.pop(key.member_id, None)
        elif isinstance(key, ConsumerGroupRegularExpressionKey):
            self._replay_regex(key.regular_expression, value)
        else:
            self._replay_member(key, value)
        self._update_state()

    def _replay_regex(self, regex: str, value: ConsumerGroupValue | None) -> None:
        if isinstance(value, ConsumerGroupRegularExpressionValue):
            self.resolved_regexes[regex] = ResolvedRegularExpression(
                frozenset(value.topics), value.version, value.timestamp
            )
            self.last_regex_refresh_ms = max(self.last_regex_refresh_ms, value.timestamp)
            self.regex_version = max(self.regex_version, value.version)
        else:
            self.resolved_regexes.pop(regex, None)

    def _replay_member(
        self,
        key: ConsumerGroupMemberMetadataKey | ConsumerGroupCurrentMemberAssignmentKey,
        value: ConsumerGroupValue | None,
    ) -> None:
        old = self.members.get(key.member_id)
        base = old if old is not None else ConsumerGroupMember(key.member_id)
        if isinstance(value, ConsumerGroupMemberMetadataValue):
            self._put_member(old, base.with_metadata(value))
        elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
            self._put_member(old, base.with_assignment(value))
        elif old is None:
            return  # a tombstone for a member this group does not have
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            self._remove_member(old)
        else:
            # The assignment's tombstone: the member keeps its subscription until its
            # own tombstone, but holds nothing (Kafka replays the same).
            self._put_member(
                old,
                replace(
                    old,
                    member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                    previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                    state=MemberState.STABLE,
                    assigned_partitions=EMPTY_ASSIGNMENT,
                    partitions_pending_revocation=EMPTY_ASSIGNMENT,
                ),
            )

    def _count(self, member: ConsumerGroupMember, sign: int) -> None:
        self._topic_subscribers.update(dict.fromkeys(member.subscribed_topic_names, sign))
        self._topic_subscribers = +self._topic_subscribers
        for counter, name in (
            (self._regex_subscribers, member.subscribed_topic_regex),
            (self._server_assignors, member.server_assignor),
        ):
            if name is not None:
                counter[name] += sign
                if counter[name] <= 0:
                    del counter[name]

    def _put_member(self, old: ConsumerGroupMember | None, new: ConsumerGroupMember) -> None:
        if old is not None:
            self._count(old, -1)
            self._release(old)
            if old.instance_id is not None and old.instance_id != new.instance_id:
                self.static_members.pop(old.instance_id, None)
        self._count(new, 1)
        self._hold(new)
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id
        self.members[new.member_id] = new

    def _remove_member(self, member: ConsumerGroupMember) -> None:
        self._count(member, -1)
        self._release(member)
        if (
            member.instance_id is not None
            and self.static_members.get(member.instance_id) == member.member_id
        ):
            del self.static_members[member.instance_id]
        del self.members[member.member_id]

    def _hold(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partition in pairs(assignment):
                epochs = self._partition_epochs.setdefault(topic_id, {})
                if partition in epochs:
                    raise RuntimeError(
                        f"group {self.group_id}: partition {topic_id}-{partition} is still "
                        f"held at epoch {epochs[partition]}; {member.member_id} cannot take it"
                    )
                epochs[partition] = member.member_epoch

    def _release(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
            for topic_id, partition in pairs(assignment):
                epochs = self._partition_epochs[topic_id]
                del epochs[partition]
                if not epochs:
                    del self._partition_epochs[topic_id]

    def _update_state(self) -> None:
        if self.state is ConsumerGroupState.DEAD:
            return
        if not self.members:
            self.state = ConsumerGroupState.EMPTY
        elif self.group_epoch > self.assignment_epoch:
            self.state = ConsumerGroupState.ASSIGNING
        elif all(m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            self.state = ConsumerGroupState.STABLE
        else:
            self.state = ConsumerGroupState.RECONCILING

    # -- lifecycle --------------------------------------------------------------------

    def cancel_timers(self) -> None:
        for timers in (self.session_timers, self.rebalance_timers):
            for handle in timers.values():
                handle.cancel()
            timers.clear()

    def kill(self) -> None:
        """Deleted or unloaded: nothing more happens to this object."""
        self.state = ConsumerGroupState.DEAD
        self.cancel_timers()

    def __repr__(self) -> str:
        return (
            f"ConsumerGroup(group_id={self.group_id}, state={self.state.value}, "
            f"epoch={self.group_epoch}, assignment_epoch={self.assignment_epoch}, "
            f"members={list(self.members)})"
        )


# Replay order of a loaded group: the latest record of every key, group-level state
# first, then members' subscriptions, targets and current assignments.
_LOAD_ORDER: Final[dict[type[ConsumerGroupKey], int]] = {
    ConsumerGroupMetadataKey: 0,
    ConsumerGroupPartitionMetadataKey: 1,
    ConsumerGroupRegularExpressionKey: 2,
    ConsumerGroupMemberMetadataKey: 3,
    ConsumerGroupTargetAssignmentMemberKey: 4,
    ConsumerGroupTargetAssignmentMetadataKey: 5,
    ConsumerGroupCurrentMemberAssignmentKey: 6,
}


@dataclass(slots=True)
class LoadedConsumerGroup:
    """The latest value of each of one group's keys read from a partition, and the log
    offset of the last record (to tell which of two group types came later).

    Event-loop only.
    """

    values: dict[ConsumerGroupKey, ConsumerGroupValue] = field(default_factory=dict)
    last_offset: int = -1

    def apply(self, key: ConsumerGroupKey, value: ConsumerGroupValue | None, offset: int) -> None:
        if value is None:
            self.values.pop(key, None)
        else:
            self.values[key] = value
        self.last_offset = offset

    def exists(self, group_id: str) -> bool:
        """A live group has its epoch record (compaction keeps it as long as it lives)."""
        return ConsumerGroupMetadataKey(group_id) in self.values

    def build(self, group_id: str) -> ConsumerGroup:
        group = ConsumerGroup(group_id)
        for key in sorted(self.values, key=lambda k: _LOAD_ORDER[type(k)]):
            group.replay(key, self.values[key])
        group.regex_version = -1
        return group
