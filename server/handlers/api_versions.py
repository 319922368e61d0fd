"""ApiVersions (18): which APIs and versions this broker speaks (KIP-511 for v3+)."""

from __future__ import annotations

import re
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.request_context import RequestContext

API_KEY: Final = 18
MIN_VERSION: Final = 0
MAX_VERSION: Final = 4

# KIP-511: client software name and version must look like this, or INVALID_REQUEST.
_SOFTWARE: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    error = ErrorCode.none
    if ctx.api_version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name or "")
        and _SOFTWARE.fullmatch(request.client_software_version or "")
    ):
        error = ErrorCode.invalid_request
    return {
        "error_code": error,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, low, high in ctx.broker.api_versions
        ],
        "throttle_time": 0,
        "finalized_features_epoch": -1,
    }
