"""SyncGroup (14): the leader hands in the assignment; every member gets its own part."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.request_context import RequestContext

API_KEY: Final = 14
MIN_VERSION: Final = 0
MAX_VERSION: Final = 5

# From v5 the protocol type and name are mandatory.
_PROTOCOL_REQUIRED_VERSION: Final = 5


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    if ctx.api_version >= _PROTOCOL_REQUIRED_VERSION and (
        protocol_type is None or protocol_name is None
    ):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.inconsistent_group_protocol,
            "assignment": b"",
        }
    # READ on the group, as Kafka's handleSyncGroupRequest (after the protocol check).
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
            "protocol_type": None,
            "protocol_name": None,
            "assignment": b"",
        }
    result = await ctx.broker.group_coordinator.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        protocol_type,
        protocol_name,
        getattr(request, "group_instance_id", None),
        {a.member_id: a.assignment for a in request.assignments},
    )
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }
