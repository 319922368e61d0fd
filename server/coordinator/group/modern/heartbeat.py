"""ConsumerGroupHeartbeat: what one heartbeat changes in a consumer group (Kafka's
GroupMetadataManager.consumerGroupHeartbeat and consumerGroupLeave), as records.

A heartbeat (member epoch >= 0) goes through three steps, as in Kafka:

1. The member is created (epoch 0) or checked (its epoch must be the one the
   coordinator knows, or the previous one with no partition it may not have: otherwise
   FENCED_MEMBER_EPOCH) and updated with what the request carries. A changed
   subscription, a new partition count of a subscribed topic, or a new group bump the
   group epoch.
2. When the group epoch is ahead of the target assignment, the assignor computes a new
   target for every member.
3. The member reconciles one step towards its target (`reconciliation`).

Epoch -1 leaves (the member is fenced: its records become tombstones and the group
epoch is bumped); epoch -2 is a static member leaving for a moment: it keeps its
partitions until it comes back under a new member id or its session expires.

Nothing here mutates the group: the planner returns the records, and the coordinator
applies them once they are written.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from tiercel.protocol.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
)
from tiercel.server.coordinator.group.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupValue,
    TopicMetadataValue,
)
from tiercel.server.coordinator.group.coordinator_records import GroupMetadataKey
from tiercel.server.coordinator.group.group_metadata import GroupMetadata, GroupState
from tiercel.server.coordinator.group.modern.assignment import (
    EMPTY_ASSIGNMENT,
    Assignment,
    to_values,
)
from tiercel.server.coordinator.group.modern.assignor import PartitionAssignor
from tiercel.server.coordinator.group.modern.consumer_group import ConsumerGroup
from tiercel.server.coordinator.group.modern.heartbeat_request import (
    HeartbeatRequest,
    HeartbeatResult,
    new_member_id,
    validate_member_epoch,
)
from tiercel.server.coordinator.group.modern.member import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupMember,
)
from tiercel.server.coordinator.group.modern.reconciliation import reconcile
from tiercel.server.coordinator.group.modern.regex_subscriptions import update_regexes
from tiercel.server.coordinator.group.modern.target_assignment import build_target_assignment
from tiercel.server.metadata.metadata_cache import MetadataCache

Record = tuple[ConsumerGroupKey | GroupMetadataKey, ConsumerGroupValue | None]


@dataclass(slots=True)
class GroupChange:
    """The records one operation writes for ``group`` and what to do once they are:
    ``result`` to answer, the ``member`` whose session restarts (its final form),
    members whose timers stop, a classic group this one replaces. Event-loop only."""

    group: ConsumerGroup
    records: list[Record]
    result: HeartbeatResult | None = None
    member: ConsumerGroupMember | None = None
    created: bool = False
    replaced_classic: GroupMetadata | None = None
    stopped: list[str] = field(default_factory=list)


class HeartbeatPlanner:
    """Computes a heartbeat's, a leave's or a fencing's records from a group's current
    state. Stateless besides its collaborators; event-loop only (it reads the metadata
    cache)."""

    def __init__(
        self,
        cache: MetadataCache,
        assignors: Mapping[str, PartitionAssignor],
        heartbeat_interval_ms: int,
        max_size: int,
    ) -> None:
        self._cache = cache
        self._assignors = assignors
        self._default_assignor = next(iter(assignors))
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._max_size = max_size

    # -- heartbeat --------------------------------------------------------------------

    def heartbeat(
        self, existing: GroupMetadata | ConsumerGroup | None, request: HeartbeatRequest, now: int
    ) -> GroupChange:
        change = self._group_for(existing, request)
        group = change.group
        member_id = request.member_id or new_member_id()
        if len(group.members) >= self._max_size and member_id not in group.members:
            raise GroupMaxSizeReachedError(
                f"The consumer group has reached its maximum capacity of {self._max_size} members."
            )
        # 1. The member, created or checked, then updated.
        if request.instance_id is None:
            member = self._dynamic_member(group, member_id, request)
            previous = group.members.get(member_id)
        else:
            member, previous = self._static_member(group, member_id, request, change.records)
        updated = _updated(member, request)
        names_changed = False
        if updated != member:
            change.records.append(
                (
                    ConsumerGroupMemberMetadataKey(group.group_id, member_id),
                    updated.metadata_value(),
                )
            )
            names_changed = updated.subscribed_topic_names != member.subscribed_topic_names
        # 2. The group epoch, and the target assignment of a new one.
        target_epoch, target = self._target(change, previous, member, updated, names_changed, now)
        # 3. One reconciliation step.
        reconciled = self._reconcile(change, updated, target_epoch, target, request)
        assigned = reconciled.assigned_partitions
        change.result = HeartbeatResult(
            member_id,
            reconciled.member_epoch,
            self._heartbeat_interval_ms,
            assigned if _is_full(request) or assigned != member.assigned_partitions else None,
        )
        change.member = reconciled
        if previous is not None and previous.member_id != member_id:
            change.stopped.append(previous.member_id)
        return change

    def _target(
        self,
        change: GroupChange,
        previous: ConsumerGroupMember | None,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        names_changed: bool,
        now: int,
    ) -> tuple[int, Assignment]:
        """Bump the group epoch when the subscriptions (or the partition counts of the
        subscribed topics) changed; the member's target assignment and its epoch."""
        group = change.group
        records = change.records
        regexes = update_regexes(group, member, updated, now, self._cache)
        records += regexes.records
        resolved = regexes.resolved
        bump = group.group_epoch == 0 or names_changed or regexes.bumps_epoch
        metadata = self.subscription_metadata(group.subscribed_topics(previous, updated, resolved))
        if metadata != group.subscription_metadata:
            records.append(_partition_metadata_record(group.group_id, metadata))
            bump = True
        epoch = group.group_epoch
        if bump:
            epoch += 1
            records.append(
                (ConsumerGroupMetadataKey(group.group_id), ConsumerGroupMetadataValue(epoch))
            )
        if epoch <= group.assignment_epoch:
            return group.assignment_epoch, group.target_assignment_for(
                updated.member_id, updated.instance_id
            )
        assignor = group.preferred_server_assignor(previous, updated) or self._default_assignor
        result = build_target_assignment(
            group,
            epoch,
            self._assignors.get(assignor, self._assignors[self._default_assignor]),
            updated,
            metadata,
            resolved,
        )
        records += result.records
        return epoch, result.targets[updated.member_id]

    @staticmethod
    def _reconcile(
        change: GroupChange,
        updated: ConsumerGroupMember,
        target_epoch: int,
        target: Assignment,
        request: HeartbeatRequest,
    ) -> ConsumerGroupMember:
        group = change.group

        def partition_epoch(topic_id: uuid.UUID, partition: int) -> int:
            # A partition this member itself is revoking is not another's to release.
            if partition in updated.partitions_pending_revocation.get(topic_id, frozenset()):
                return -1
            return group.current_partition_epoch(topic_id, partition)

        reconciled = reconcile(
            updated, target_epoch, target, partition_epoch, request.owned_partitions
        )
        if reconciled != updated:
            change.records.append(
                (
                    ConsumerGroupCurrentMemberAssignmentKey(group.group_id, updated.member_id),
                    reconciled.assignment_value(),
                )
            )
        return reconciled

    def _group_for(
        self, existing: GroupMetadata | ConsumerGroup | None, request: HeartbeatRequest
    ) -> GroupChange:
        group_id = request.group_id
        joining = request.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        if isinstance(existing, ConsumerGroup):
            return GroupChange(existing, [])
        if existing is None:
            if not joining:
                raise GroupIdNotFoundError(f"Consumer group {group_id} not found.")
            return GroupChange(ConsumerGroup(group_id), [], created=True)
        if joining and existing.is_(GroupState.EMPTY):
            # An empty classic group (maybe one that only stores offsets) becomes a
            # consumer group; its offsets stay.
            return GroupChange(
                ConsumerGroup(group_id),
                [(GroupMetadataKey(group_id), None)],
                created=True,
                replaced_classic=existing,
            )
        raise GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")

    @staticmethod
    def _dynamic_member(
        group: ConsumerGroup, member_id: str, request: HeartbeatRequest
    ) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            if request.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                raise UnknownMemberIdError(
                    f"Member {member_id} is not a member of group {group.group_id}."
                )
            member = ConsumerGroupMember(member_id)
        validate_member_epoch(member, request.member_epoch, request.owned_partitions)
        return member

    @staticmethod
    def _static_member(
        group: ConsumerGroup, member_id: str, request: HeartbeatRequest, records: list[Record]
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """The member and the current member it replaces or updates (None: new)."""
        instance_id = request.instance_id
        assert instance_id is not None
        existing = group.static_member(instance_id)
        if request.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if existing is None:
                current = group.members.get(member_id)
                return current or ConsumerGroupMember(member_id), current
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise UnreleasedInstanceIdError(
                    f"Static member {member_id} with instance id {instance_id} cannot join "
                    f"the group because the instance id is owned by {existing.member_id} member."
                )
            # The instance comes back under a new member id: it takes the place, the
            # partitions and the target of the incarnation that left (KIP-848).
            successor = replace(
                existing, member_id=member_id, member_epoch=0, previous_member_epoch=0
            )
            records += _replace_member_records(group, existing, successor)
            return successor, existing
        if existing is None:
            raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise FencedInstanceIdError(
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {existing.member_id}."
            )
        validate_member_epoch(existing, request.member_epoch, request.owned_partitions)
        return existing, existing

    # -- leaving and fencing -----------------------------------------------------------

    def leave(
        self, existing: GroupMetadata | ConsumerGroup | None, request: HeartbeatRequest
    ) -> GroupChange:
        if not isinstance(existing, ConsumerGroup):
            what = "not found" if existing is None else "not a consumer group"
            raise GroupIdNotFoundError(f"Group {request.group_id} {what}.")
        group = existing
        result = HeartbeatResult(request.member_id, request.member_epoch)
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise UnknownMemberIdError(
                    f"Member {request.member_id} is not a member of group {group.group_id}."
                )
            return GroupChange(group, self.fence(group, member), result, stopped=[member.member_id])
        member = group.static_member(request.instance_id)
        if member is None:
            raise UnknownMemberIdError(f"Instance id {request.instance_id} is unknown.")
        if member.member_id != request.member_id:
            raise FencedInstanceIdError(
                f"Static member {request.member_id} with instance id {request.instance_id} "
                f"was fenced by member {member.member_id}."
            )
        if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            return GroupChange(group, self.fence(group, member), result, stopped=[member.member_id])
        # A static member leaving for a moment: it keeps its place (and its session).
        left = replace(
            member,
            member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
            partitions_pending_revocation=EMPTY_ASSIGNMENT,
        )
        record: Record = (
            ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member.member_id),
            left.assignment_value(),
        )
        return GroupChange(
            group, [record], HeartbeatResult(member.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        )

    def fence(self, group: ConsumerGroup, member: ConsumerGroupMember) -> list[Record]:
        """Remove a member (it left, or its session or rebalance timeout expired) and
        bump the group epoch, so the others get its partitions."""
        group_id = group.group_id
        records: list[Record] = [
            (ConsumerGroupCurrentMemberAssignmentKey(group_id, member.member_id), None),
            (ConsumerGroupTargetAssignmentMemberKey(group_id, member.member_id), None),
            (ConsumerGroupMemberMetadataKey(group_id, member.member_id), None),
        ]
        resolved = dict(group.resolved_regexes)
        regex = member.subscribed_topic_regex
        if regex is not None and group.regex_subscribers(regex) == 1:
            records.append((ConsumerGroupRegularExpressionKey(group_id, regex), None))
            resolved.pop(regex, None)
        metadata = self.subscription_metadata(group.subscribed_topics(member, None, resolved))
        if metadata != group.subscription_metadata:
            records.append(_partition_metadata_record(group_id, metadata))
        records.append(
            (ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(group.group_epoch + 1))
        )
        return records

    def subscription_metadata(self, topics: Iterable[str]) -> dict[str, TopicMetadataValue]:
        """Id and partition count of each subscribed topic that exists."""
        metadata = {}
        for name in topics:
            topic = self._cache.topic(name)
            if topic is not None:
                metadata[name] = TopicMetadataValue(topic.topic_id, name, topic.partition_count)
        return metadata


def _is_full(request: HeartbeatRequest) -> bool:
    """A join, or a heartbeat with every field a full request carries (a client sends
    one after an error): it gets its whole assignment back."""
    return request.member_epoch == JOIN_GROUP_MEMBER_EPOCH or (
        request.rebalance_timeout_ms != -1
        and (
            request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None
        )
        and request.owned_partitions is not None
    )


def _updated(member: ConsumerGroupMember, request: HeartbeatRequest) -> ConsumerGroupMember:
    """The member with what the request changes (absent fields keep their value)."""
    names = request.subscribed_topic_names
    regex = request.subscribed_topic_regex
    return replace(
        member,
        instance_id=member.instance_id if request.instance_id is None else request.instance_id,
        rack_id=member.rack_id if request.rack_id is None else request.rack_id,
        rebalance_timeout_ms=(
            member.rebalance_timeout_ms
            if request.rebalance_timeout_ms == -1
            else request.rebalance_timeout_ms
        ),
        server_assignor=(
            member.server_assignor if request.server_assignor is None else request.server_assignor
        ),
        subscribed_topic_names=member.subscribed_topic_names if names is None else frozenset(names),
        # An empty expression (librdkafka sends one with topic names) means none.
        subscribed_topic_regex=member.subscribed_topic_regex if regex is None else regex or None,
        client_id=request.client_id,
        client_host=request.client_host,
    )


def _replace_member_records(
    group: ConsumerGroup, old: ConsumerGroupMember, new: ConsumerGroupMember
) -> list[Record]:
    group_id = group.group_id
    target = group.target_assignment.get(old.member_id, EMPTY_ASSIGNMENT)
    return [
        (ConsumerGroupCurrentMemberAssignmentKey(group_id, old.member_id), None),
        (ConsumerGroupTargetAssignmentMemberKey(group_id, old.member_id), None),
        (ConsumerGroupMemberMetadataKey(group_id, old.member_id), None),
        (ConsumerGroupMemberMetadataKey(group_id, new.member_id), new.metadata_value()),
        (
            ConsumerGroupTargetAssignmentMemberKey(group_id, new.member_id),
            ConsumerGroupTargetAssignmentMemberValue(to_values(target)),
        ),
        (ConsumerGroupCurrentMemberAssignmentKey(group_id, new.member_id), new.assignment_value()),
    ]


def _partition_metadata_record(group_id: str, metadata: Mapping[str, TopicMetadataValue]) -> Record:
    topics = tuple(metadata[name] for name in sorted(metadata))
    return (
        ConsumerGroupPartitionMetadataKey(group_id),
        ConsumerGroupPartitionMetadataValue(topics),
    )
