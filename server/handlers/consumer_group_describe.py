"""ConsumerGroupDescribe (69): state, epochs, assignor and members of KIP-848 consumer
groups, with each member's current and target assignment (topics by id and name). A
classic group, or an unknown one, is GROUP_ID_NOT_FOUND."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, authorized_operations
from tiercel.server.coordinator.group.modern.assignment import Assignment
from tiercel.server.coordinator.group.modern.consumer_group_coordinator import (
    DescribedConsumerGroup,
    DescribedMember,
)
from tiercel.server.handlers.common import AUTHORIZED_OPERATIONS_OMITTED
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.request_context import RequestContext

API_KEY: Final = 69
MIN_VERSION: Final = 0
MAX_VERSION: Final = 1

# The member_type of a member that uses the consumer protocol (v1).
_CONSUMER_MEMBER_TYPE: Final = 1


def _topic_partitions(assignment: Assignment, cache: MetadataCache) -> dict[str, Any]:
    """Topics the metadata no longer knows are left out, as Kafka does."""
    topics = []
    for topic_id, partitions in assignment.items():
        name = cache.topic_name(topic_id)
        if name is not None:
            topics.append(
                {"topic_id": topic_id, "topic_name": name, "partitions": sorted(partitions)}
            )
    return {"topic_partitions": topics}


def _member(member: DescribedMember, cache: MetadataCache) -> dict[str, Any]:
    return {
        "member_id": member.member_id,
        "instance_id": member.instance_id,
        "rack_id": member.rack_id,
        "member_epoch": member.member_epoch,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "subscribed_topic_names": member.subscribed_topic_names,
        "subscribed_topic_regex": member.subscribed_topic_regex,
        "assignment": _topic_partitions(member.assignment, cache),
        "target_assignment": _topic_partitions(member.target_assignment, cache),
        "member_type": _CONSUMER_MEMBER_TYPE,
    }


def _group(ctx: RequestContext, group: DescribedConsumerGroup, include: bool) -> dict[str, Any]:
    cache = ctx.broker.metadata_cache
    return {
        "error_code": group.error,
        "error_message": group.error_message,
        "group_id": group.group_id,
        "group_state": group.state,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor_name": group.assignor_name,
        "members": [_member(m, cache) for m in group.members],
        "authorized_operations": (
            authorized_operations(ctx, ResourceType.GROUP, group.group_id)
            if include and not group.error
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    }


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # DESCRIBE on each group, as Kafka's handleConsumerGroupDescribe.
    allowed = [
        g for g in request.group_ids if authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g)
    ]
    described = ctx.broker.group_coordinator.consumer_group_describe(allowed)
    include = request.include_authorized_operations
    groups = [_group(ctx, g, include) for g in described]
    groups.extend(
        {
            "error_code": ErrorCode.group_authorization_failed,
            "error_message": None,
            "group_id": g,
            "group_state": "",
            "group_epoch": 0,
            "assignment_epoch": 0,
            "assignor_name": "",
            "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }
        for g in request.group_ids
        if g not in allowed
    )
    return {"throttle_time": 0, "groups": groups}
