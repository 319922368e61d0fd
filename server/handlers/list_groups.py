"""ListGroups (16): the groups this coordinator owns, filtered by state (v4+), type (v5+)."""

from __future__ import annotations

from typing import Any, Final

from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.request_context import RequestContext

API_KEY: Final = 16
MIN_VERSION: Final = 0
MAX_VERSION: Final = 5


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    error, groups = ctx.broker.group_coordinator.list_groups(
        getattr(request, "states_filter", ()) or (), getattr(request, "types_filter", ()) or ()
    )
    # DESCRIBE on the cluster lists every group; without it, the groups the principal
    # may DESCRIBE (Kafka's handleListGroupsRequest).
    if not authorize(
        ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
    ):
        groups = [
            g
            for g in groups
            if authorize(
                ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id, log_if_denied=False
            )
        ]
    return {
        "throttle_time": 0,
        "error_code": error,
        "groups": [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": g.group_type,
            }
            for g in groups
        ],
    }
