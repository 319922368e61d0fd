"""Who may commit offsets to a group, with OffsetCommit or a transactional producer's
TxnOffsetCommit: Kafka 4's Group.validateOffsetCommit of both group types (ClassicGroup,
ConsumerGroup) and OffsetMetadataManager's validateOffsetCommit and
validateTransactionalOffsetCommit around them, in one place so that the two APIs cannot
drift apart.

The transactional differences, as in Kafka 4: TxnOffsetCommit v0-2 carry no member
(KIP-447 added member id, generation and instance id in v3), so a commit naming
nobody is accepted by a group with members; the classic group's state is not enforced
(no REBALANCE_IN_PROGRESS); and a consumer group member's stale epoch is answered
ILLEGAL_GENERATION, never STALE_MEMBER_EPOCH, which producers do not know (Kafka's
validateTransactionalOffsetCommit translates it for every TxnOffsetCommit version).
"""

from __future__ import annotations

from typing import Final

from tiercel.protocol.errors import (
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)
from tiercel.server.coordinator.group.group_metadata import GroupMetadata, GroupState
from tiercel.server.coordinator.group.group_results import UNKNOWN_MEMBER_ID
from tiercel.server.coordinator.group.membership import validate_current_member
from tiercel.server.coordinator.group.modern.consumer_group import ConsumerGroup

# OffsetCommit from this version on carries member epochs (Kafka rejects older ones from
# members of consumer groups).
MEMBER_EPOCH_COMMIT_VERSION: Final = 9
# What the classic protocol sends for "no generation" (JoinGroupRequest.UNKNOWN_GENERATION_ID).
UNKNOWN_GENERATION_ID: Final = -1


def validate_classic_commit(
    group: GroupMetadata,
    member_id: str,
    group_instance_id: str | None,
    generation_id: int,
    is_transactional: bool,
) -> None:
    """Kafka's ClassicGroup.validateOffsetCommit: an Empty group takes commits without a
    generation (admin clients, consumers without group management); a commit naming a
    member, an instance or a generation must come from the current member at the
    current generation."""
    if group.is_(GroupState.DEAD):
        raise CoordinatorNotAvailableError(f"group {group.group_id} is being removed")
    if generation_id < 0 and group.is_(GroupState.EMPTY):
        return
    operation = "txn-offset-commit" if is_transactional else "offset-commit"
    if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
        validate_current_member(group, member_id, group_instance_id, operation)
        if generation_id != group.generation_id:
            raise IllegalGenerationError(
                f"generation {generation_id} is not {group.generation_id} of {group.group_id}"
            )
    elif not is_transactional and not group.is_(GroupState.EMPTY):
        # OffsetCommit v0 names no member: only an Empty group takes it. Old
        # TxnOffsetCommit versions name none either, and are taken.
        raise UnknownMemberIdError(f"only members may commit to {group.group_id}")
    if not is_transactional and group.is_(GroupState.COMPLETING_REBALANCE):
        # The member knows the new generation but has no assignment yet.
        raise RebalanceInProgressError(f"group {group.group_id} is completing a rebalance")


def validate_consumer_group_commit(
    group: ConsumerGroup,
    member_id: str,
    group_instance_id: str | None,
    member_epoch: int,
    is_transactional: bool,
    api_version: int,
) -> None:
    """Kafka's ConsumerGroup.validateOffsetCommit: anyone may commit to a group without
    members without an epoch; a transactional commit naming no member, epoch or
    instance is taken too; otherwise the member must exist (UNKNOWN_MEMBER_ID), commit
    with OffsetCommit v9+ (UNSUPPORTED_VERSION; TxnOffsetCommit has no such bound) and
    carry its current member epoch (STALE_MEMBER_EPOCH; every Tiercel member uses the
    consumer protocol, so never the ILLEGAL_GENERATION Kafka gives classic-protocol
    members of a consumer group).

    A killed group (deleted or unloaded, which also drops it from the coordinator's
    map) takes no commit: COORDINATOR_NOT_AVAILABLE, as a Dead classic group."""
    if group.is_dead:
        raise CoordinatorNotAvailableError(f"group {group.group_id} is being removed")
    if member_epoch < 0 and not group.members:
        return
    if (
        is_transactional
        and member_epoch == UNKNOWN_GENERATION_ID
        and member_id == UNKNOWN_MEMBER_ID
        and group_instance_id is None
    ):
        return
    member = group.members.get(member_id)
    if member is None:
        raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
    if not is_transactional and api_version < MEMBER_EPOCH_COMMIT_VERSION:
        raise UnsupportedVersionError(
            "OffsetCommit version 9 or above must be used by members using the consumer protocol"
        )
    if member_epoch != member.member_epoch:
        raise StaleMemberEpochError(
            f"The received member epoch {member_epoch} does not match the expected member "
            f"epoch {member.member_epoch}."
        )


def validate_transactional_consumer_group_commit(
    group: ConsumerGroup, member_id: str, group_instance_id: str | None, generation_id: int
) -> None:
    """TxnOffsetCommit's check of a consumer group (Kafka's
    validateTransactionalOffsetCommit): a stale member epoch is ILLEGAL_GENERATION, the
    error a transactional producer handles (it aborts the transaction: its consumer
    has lost or is losing its partitions), whatever the request's version."""
    try:
        validate_consumer_group_commit(
            group, member_id, group_instance_id, generation_id, is_transactional=True, api_version=0
        )
    except StaleMemberEpochError as e:
        raise IllegalGenerationError(e.message) from e
