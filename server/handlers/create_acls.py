"""CreateAcls (30) on a node that does not forward it: one without process.roles, which
cannot have an authorizer, so every binding gets SECURITY_DISABLED (Kafka's
AclApis.handleCreateAcls without an authorizer). A KRaft broker forwards the request to
the controller (`server/controller/controller_acl_apis`)."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.request_context import RequestContext

API_KEY: Final = 30
MIN_VERSION: Final = 1
MAX_VERSION: Final = 3

_DISABLED: Final = "No Authorizer is configured."


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    result = {"error_code": ErrorCode.security_disabled, "error_message": _DISABLED}
    return {"throttle_time": 0, "results": [result for _ in request.creations]}
