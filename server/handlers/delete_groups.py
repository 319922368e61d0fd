"""DeleteGroups (42): delete Empty groups and their committed offsets."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import filter_by_authorized
from tiercel.server.request_context import RequestContext

API_KEY: Final = 42
MIN_VERSION: Final = 0
MAX_VERSION: Final = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    names = list(dict.fromkeys(request.groups_names))
    # DELETE on each group, as Kafka's handleDeleteGroupsRequest.
    allowed = filter_by_authorized(ctx, AclOperation.DELETE, ResourceType.GROUP, names)
    errors = await ctx.broker.group_coordinator.delete_groups([n for n in names if n in allowed])
    errors.update(
        (name, ErrorCode.group_authorization_failed) for name in names if name not in allowed
    )
    return {
        "throttle_time": 0,
        "results": [{"group_id": name, "error_code": errors[name]} for name in names],
    }
