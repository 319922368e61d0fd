"""What a server-side assignor sees and returns (Kafka's GroupSpec, MemberSubscription,
SubscribedTopicDescriber and ConsumerGroupPartitionAssignor).

The coordinator hands an assignor every member's subscribed topic ids (only topics that
exist), its rack, its instance id and its current target assignment (the stickiness
input), plus the partition count of every subscribed topic; the assignor returns a new
target assignment for every member. Assignors are pure functions of that input.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from tiercel.server.coordinator.group.modern.assignment import Assignment


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """Invariant: every id in ``topic_ids`` has a partition count in the assignor's
    input. Immutable; any thread."""

    instance_id: str | None
    rack_id: str | None
    topic_ids: frozenset[uuid.UUID]
    assignment: Assignment


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """``homogeneous``: every member subscribes to the same topics (Kafka's
    SubscriptionType.HOMOGENEOUS), which lets an assignor take a faster path."""

    members: Mapping[str, MemberSubscription]
    homogeneous: bool


class PartitionAssignor(Protocol):
    """A server-side assignor. Implementations are stateless; any thread."""

    @property
    def name(self) -> str: ...

    def assign(
        self, group: GroupSpec, partition_counts: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]:
        """A target assignment for every member of ``group`` (empty ones included)."""
        ...


def is_homogeneous(subscriptions: Mapping[str, frozenset[uuid.UUID]]) -> bool:
    return len(set(subscriptions.values())) <= 1
