"""ConsumerGroupHeartbeat (68): a member of a KIP-848 consumer group joins, heartbeats,
reports the partitions it owns, or leaves; the answer is its member epoch and, when it
changed (or the request was a full one), its assignment.

From v1 the client generates its member id and may subscribe with a regular expression.
"""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.coordinator.group.modern.assignment import Assignment, assignment_of
from tiercel.server.coordinator.group.modern.heartbeat_request import HeartbeatRequest
from tiercel.server.handlers.common import timeout_ms
from tiercel.server.handlers.join_group import client_host
from tiercel.server.request_context import RequestContext

API_KEY: Final = 68
MIN_VERSION: Final = 0
MAX_VERSION: Final = 1

# From v1 the member id comes from the client and must not be empty.
_CLIENT_MEMBER_ID_VERSION: Final = 1


def _owned(request: Any) -> Assignment | None:
    if request.topic_partitions is None:
        return None
    return assignment_of(
        (topic.topic_id, partition)
        for topic in request.topic_partitions
        if topic.topic_id is not None
        for partition in topic.partitions
    )


def _assignment(assignment: Assignment | None) -> dict[str, Any] | None:
    if assignment is None:
        return None
    return {
        "topic_partitions": [
            {"topic_id": topic_id, "partitions": sorted(partitions)}
            for topic_id, partitions in assignment.items()
        ]
    }


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # READ on the group, as Kafka's handleConsumerGroupHeartbeat.
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
            "error_message": None,
            "member_id": None,
            "member_epoch": 0,
            "heartbeat_interval": 0,
            "assignment": None,
        }
    heartbeat = HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=timeout_ms(request.rebalance_timeout),
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned_partitions=_owned(request),
        client_id=ctx.header.client_id or "",
        client_host=client_host(ctx),
        member_id_required=ctx.api_version >= _CLIENT_MEMBER_ID_VERSION,
    )
    outcome = await ctx.broker.group_coordinator.consumer_group_heartbeat(heartbeat)
    result = outcome.result
    if result is None:
        return {
            "throttle_time": 0,
            "error_code": outcome.error,
            "error_message": outcome.error_message,
            "member_id": None,
            "member_epoch": 0,
            "heartbeat_interval": 0,
            "assignment": None,
        }
    return {
        "throttle_time": 0,
        "error_code": outcome.error,
        "error_message": None,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "assignment": _assignment(result.assignment),
    }
