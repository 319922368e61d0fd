"""LeaveGroup (13): members leave (one before v3, a batch from v3, by instance id too)."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.coordinator.group.membership import LeavingMember
from tiercel.server.request_context import RequestContext

API_KEY: Final = 13
MIN_VERSION: Final = 0
MAX_VERSION: Final = 5

_BATCHED_VERSION: Final = 3


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # READ on the group, as Kafka's handleLeaveGroupRequest.
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
            "members": [],
        }
    batched = ctx.api_version >= _BATCHED_VERSION
    if batched:
        members = [
            LeavingMember(m.member_id, m.group_instance_id, getattr(m, "reason", None))
            for m in request.members
        ]
    else:
        members = [LeavingMember(request.member_id, None)]
    error, results = ctx.broker.group_coordinator.leave_group(request.group_id, members)
    if not batched:
        # One member: its error is the response's (Kafka's LeaveGroupResponse for v0-2).
        if error is ErrorCode.none and results:
            error = results[0].error
        return {"throttle_time": 0, "error_code": error}
    return {
        "throttle_time": 0,
        "error_code": error,
        "members": [
            {
                "member_id": r.member_id,
                "group_instance_id": r.group_instance_id,
                "error_code": r.error,
            }
            for r in results
        ],
    }
