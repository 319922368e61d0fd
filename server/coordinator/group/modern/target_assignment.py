"""A new target assignment for a new group epoch (Kafka's TargetAssignmentBuilder).

The assignor sees every member as it will be once the heartbeat's records are applied:
the member being updated in its new form, a static member that replaces an earlier
incarnation of its instance id in place of it (and with its target, so the assignment
stays sticky). Only the members whose target changed get a
ConsumerGroupTargetAssignmentMember record; the ConsumerGroupTargetAssignmentMetadata
record that follows carries the new epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tiercel.server.coordinator.group.consumer_group_records import (
    ConsumerGroupKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    TopicMetadataValue,
)
from tiercel.server.coordinator.group.modern.assignment import (
    EMPTY_ASSIGNMENT,
    Assignment,
    to_values,
)
from tiercel.server.coordinator.group.modern.assignor import (
    GroupSpec,
    MemberSubscription,
    PartitionAssignor,
    is_homogeneous,
)
from tiercel.server.coordinator.group.modern.consumer_group import ConsumerGroup
from tiercel.server.coordinator.group.modern.member import ConsumerGroupMember
from tiercel.server.coordinator.group.modern.regex import ResolvedRegularExpression

Record = tuple[ConsumerGroupKey, ConsumerGroupValue | None]


@dataclass(frozen=True, slots=True)
class TargetAssignmentResult:
    """The records to write and every member's new target. Immutable; any thread."""

    records: list[Record]
    targets: dict[str, Assignment]


def build_target_assignment(
    group: ConsumerGroup,
    group_epoch: int,
    assignor: PartitionAssignor,
    updated: ConsumerGroupMember | None,
    subscription_metadata: Mapping[str, TopicMetadataValue],
    resolved_regexes: Mapping[str, ResolvedRegularExpression],
) -> TargetAssignmentResult:
    """The target for ``group_epoch`` with ``updated`` in its new form (a new member
    included)."""
    members = dict(group.members)
    inherited: dict[str, Assignment] = {}
    if updated is not None:
        members[updated.member_id] = updated
        previous = (
            None if updated.instance_id is None else group.static_members.get(updated.instance_id)
        )
        if previous is not None and previous != updated.member_id:
            members.pop(previous, None)
            inherited[updated.member_id] = group.target_assignment.get(previous, EMPTY_ASSIGNMENT)
    topic_ids = {name: t.topic_id for name, t in subscription_metadata.items()}
    subscriptions = {
        member_id: frozenset(
            topic_ids[name]
            for name in group.member_topics(member, resolved_regexes)
            if name in topic_ids
        )
        for member_id, member in members.items()
    }
    spec = GroupSpec(
        {
            member_id: MemberSubscription(
                member.instance_id,
                member.rack_id,
                subscriptions[member_id],
                inherited.get(member_id, group.target_assignment.get(member_id, EMPTY_ASSIGNMENT)),
            )
            for member_id, member in members.items()
        },
        is_homogeneous(subscriptions),
    )
    counts = {t.topic_id: t.num_partitions for t in subscription_metadata.values()}
    targets = assignor.assign(spec, counts)
    records: list[Record] = []
    for member_id in members:
        target = targets.setdefault(member_id, EMPTY_ASSIGNMENT)
        if group.target_assignment.get(member_id) != target:
            records.append(
                (
                    ConsumerGroupTargetAssignmentMemberKey(group.group_id, member_id),
                    ConsumerGroupTargetAssignmentMemberValue(to_values(target)),
                )
            )
    records.append(
        (
            ConsumerGroupTargetAssignmentMetadataKey(group.group_id),
            ConsumerGroupTargetAssignmentMetadataValue(group_epoch),
        )
    )
    return TargetAssignmentResult(records, targets)
