"""A ConsumerGroupHeartbeat in version-independent form, its answer, and the checks that
need no group state (Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid) or only the
member's (its epoch: FENCED_MEMBER_EPOCH).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tiercel.protocol.errors import (
    FencedMemberEpochError,
    InvalidRequestError,
    UnsupportedAssignorError,
)
from tiercel.server.coordinator.group.modern.assignment import Assignment, is_subset
from tiercel.server.coordinator.group.modern.member import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupMember,
)
from tiercel.storage.checkpoint_file import random_kafka_uuid, uuid_to_kafka_str


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat in version-independent form. ``None`` (and -1 for the
    rebalance timeout) means "unchanged since the last heartbeat"; ``owned_partitions``
    None means the request did not say."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned_partitions: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    member_id_required: bool = True
    """From version 1 the client generates its member id; version 0 may leave it empty."""

    @property
    def is_leave(self) -> bool:
        return self.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH)


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """What the response says; ``assignment`` None leaves it out. Immutable."""

    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


def new_member_id() -> str:
    """A random id in Kafka's Uuid form (URL-safe base64, never starting with '-')."""
    return uuid_to_kafka_str(random_kafka_uuid())


def validate_request(request: HeartbeatRequest, assignors: Iterable[str]) -> None:
    """Kafka's checks of the request itself (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR)."""
    if not request.group_id:
        raise InvalidRequestError("GroupId can't be empty.")
    if request.member_id_required and not request.member_id:
        raise InvalidRequestError("MemberId can't be empty.")
    if request.instance_id == "":
        raise InvalidRequestError("InstanceId can't be empty.")
    if request.rack_id == "":
        raise InvalidRequestError("RackId can't be empty.")
    _validate_epoch_fields(request)
    names = list(assignors)
    if request.server_assignor is not None and request.server_assignor not in names:
        raise UnsupportedAssignorError(
            f"ServerAssignor {request.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(names)}."
        )


def _validate_epoch_fields(request: HeartbeatRequest) -> None:
    """What a join, a heartbeat and a leave must carry."""
    epoch = request.member_epoch
    if epoch == JOIN_GROUP_MEMBER_EPOCH:
        if request.rebalance_timeout_ms == -1:
            raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
        if request.owned_partitions is None or request.owned_partitions:
            raise InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise InvalidRequestError(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                "when (re-)joining."
            )
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise InvalidRequestError(f"MemberEpoch is {epoch}, but must be >= -2.")
    elif not request.member_id:
        raise InvalidRequestError("MemberId can't be empty.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and request.instance_id is None:
        raise InvalidRequestError("InstanceId can't be null.")


def _fenced(received: int, known: int) -> FencedMemberEpochError:
    relation = "greater" if received > known else "smaller"
    return FencedMemberEpochError(
        f"The consumer group member has a {relation} member epoch ({received}) than the one "
        f"known by the group coordinator ({known}). The member must abandon all its "
        "partitions and rejoin."
    )


def validate_member_epoch(
    member: ConsumerGroupMember, received: int, owned: Assignment | None
) -> None:
    """A member's heartbeat must carry its epoch; the previous one is accepted from a
    member holding only partitions it still has (the response bumping it was lost)."""
    if received > member.member_epoch:
        raise _fenced(received, member.member_epoch)
    if received < member.member_epoch and (
        received != member.previous_member_epoch or not is_subset(owned, member.assigned_partitions)
    ):
        raise _fenced(received, member.member_epoch)
