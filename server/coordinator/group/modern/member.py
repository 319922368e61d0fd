"""ConsumerGroupMember: one member of a KIP-848 consumer group (Kafka's ConsumerGroupMember).

A member has two halves, each persisted as its own record: its subscription (client,
rack, subscribed topic names and regular expression, rebalance timeout, preferred
server assignor: ConsumerGroupMemberMetadata) and its current assignment (member epoch,
previous epoch, reconciliation state, assigned partitions and partitions it still has to
revoke: ConsumerGroupCurrentMemberAssignment).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Final

from tiercel.server.coordinator.group.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataValue,
)
from tiercel.server.coordinator.group.modern.assignment import (
    EMPTY_ASSIGNMENT,
    Assignment,
    from_values,
    to_values,
)

# The member epochs a ConsumerGroupHeartbeat carries to join, leave, or (a static
# member) leave for a moment and come back with its instance id.
JOIN_GROUP_MEMBER_EPOCH: Final = 0
LEAVE_GROUP_MEMBER_EPOCH: Final = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH: Final = -2


class MemberState(IntEnum):
    """Kafka's MemberState; the value is what the record stores."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        """A state written by a newer Kafka is UNKNOWN (the member is then fenced)."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """Invariants: ``assigned_partitions`` and ``partitions_pending_revocation`` are
    disjoint; pending revocations exist only in UNREVOKED_PARTITIONS;
    ``subscribed_topic_regex`` is None for "no regular expression" (Kafka's "").

    Immutable: every change is a new value (``replace``); any thread.
    """

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = field(default_factory=lambda: EMPTY_ASSIGNMENT)
    partitions_pending_revocation: Assignment = field(default_factory=lambda: EMPTY_ASSIGNMENT)

    def is_reconciled_to(self, target_assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_assignment_epoch

    def with_epoch(self, epoch: int) -> ConsumerGroupMember:
        """The member moved to ``epoch``; the epoch it leaves becomes the previous one."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch)

    # -- records ---------------------------------------------------------------------

    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=tuple(sorted(self.subscribed_topic_names)),
            subscribed_topic_regex=self.subscribed_topic_regex or "",
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor,
        )

    def assignment_value(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=int(self.state),
            assigned_partitions=to_values(self.assigned_partitions),
            partitions_pending_revocation=to_values(self.partitions_pending_revocation),
        )

    def with_metadata(self, value: ConsumerGroupMemberMetadataValue) -> ConsumerGroupMember:
        return replace(
            self,
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=frozenset(value.subscribed_topic_names),
            subscribed_topic_regex=value.subscribed_topic_regex or None,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor=value.server_assignor,
        )

    def with_assignment(
        self, value: ConsumerGroupCurrentMemberAssignmentValue
    ) -> ConsumerGroupMember:
        return replace(
            self,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=MemberState.from_value(value.state),
            assigned_partitions=from_values(value.assigned_partitions),
            partitions_pending_revocation=from_values(value.partitions_pending_revocation),
        )
