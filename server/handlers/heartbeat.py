"""Heartbeat (12): a member is alive; the answer says whether the group rebalances."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.request_context import RequestContext

API_KEY: Final = 12
MIN_VERSION: Final = 0
MAX_VERSION: Final = 4


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # READ on the group, as Kafka's handleHeartbeatRequest.
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    error = ctx.broker.group_coordinator.heartbeat(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        request.generation_id,
    )
    return {"throttle_time": 0, "error_code": error}
