"""DeleteGroups (42): delete Empty groups and their committed offsets."""

from __future__ import annotations

from typing import Any, Final

from tiercel.server.request_context import RequestContext

API_KEY: Final = 42
MIN_VERSION: Final = 0
MAX_VERSION: Final = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    names = list(dict.fromkeys(request.groups_names))
    errors = await ctx.broker.group_coordinator.delete_groups(names)
    return {
        "throttle_time": 0,
        "results": [{"group_id": name, "error_code": errors[name]} for name in names],
    }
