"""SaslHandshake (17) once a connection is past authentication, or on a listener without
SASL: ILLEGAL_SASL_STATE, as Kafka's KafkaApis.handleSaslHandshakeRequest. On a SASL
listener the handshake itself is answered before KafkaApis, by
`server.network.sasl_server_authenticator`, which shares these versions."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.request_context import RequestContext

API_KEY: Final = 17
# v0 is followed by raw SASL tokens, v1 by SaslAuthenticate requests (KIP-152).
MIN_VERSION: Final = 0
MAX_VERSION: Final = 1


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}
