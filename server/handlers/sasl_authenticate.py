"""SaslAuthenticate (36) once a connection is past authentication, or on a listener without
SASL: ILLEGAL_SASL_STATE with Kafka's message, as KafkaApis.handleSaslAuthenticateRequest.
During authentication `server.network.sasl_server_authenticator` answers it, with these
versions (v1 adds session_lifetime_ms, v2 is flexible)."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.request_context import RequestContext

API_KEY: Final = 36
MIN_VERSION: Final = 0
MAX_VERSION: Final = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.illegal_sasl_state,
        "error_message": "SaslAuthenticate request received after successful authentication",
        "auth_bytes": b"",
        "session_lifetime": 0,
    }
