"""ListGroups (16): the groups this coordinator owns, filtered by state (v4+), type (v5+)."""

from __future__ import annotations

from typing import Any, Final

from tiercel.server.request_context import RequestContext

API_KEY: Final = 16
MIN_VERSION: Final = 0
MAX_VERSION: Final = 5


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    error, groups = ctx.broker.group_coordinator.list_groups(
        getattr(request, "states_filter", ()) or (), getattr(request, "types_filter", ()) or ()
    )
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
