"""OAuthBearerSaslServer: the server side of SASL/OAUTHBEARER (RFC 7628), as Kafka's
`OAuthBearerSaslServer` with its default unsecured validator.

The client's initial response carries the token. A valid one completes the exchange at
once (empty challenge) with the token's principal as `authorization_id`; an
authorization id other than that principal is refused with Kafka's message. A refused
token is answered, as RFC 7628 §3.2.2 wants, with a JSON error challenge
(`{"status":"invalid_token"}`, or `insufficient_scope` with the required scope), to
which the client replies with a lone %x01; only then does the exchange fail, with that
JSON as the message the client sees. A malformed message is a SaslError (logged; the
client gets the generic failure). Extensions are accepted as Kafka's unsecured validator
accepts them: all of them. One instance per connection; event-loop only.
"""

from __future__ import annotations

from collections.abc import Callable

from tiercel.protocol.sasl.oauthbearer_client_initial_response import (
    CONTROL_A,
    OAuthBearerClientInitialResponse,
    SaslMessageError,
)
from tiercel.protocol.sasl.oauthbearer_unsecured_jws import (
    OAuthBearerIllegalTokenError,
    OAuthBearerUnsecuredJws,
)
from tiercel.server.network.oauthbearer_validator import (
    OAuthBearerUnsecuredValidator,
    json_error_response,
)
from tiercel.server.network.plain_sasl_server import SaslAuthenticationError
from tiercel.server.network.scram_sasl_server import SaslError

__all__ = ["OAuthBearerSaslServer"]


class OAuthBearerSaslServer:
    """Invariant: `token` (and so `authorization_id`) is None until the exchange is
    complete."""

    def __init__(
        self, validator: OAuthBearerUnsecuredValidator, clock_ms: Callable[[], int]
    ) -> None:
        self._validator = validator
        self._clock_ms = clock_ms
        self._error: OAuthBearerIllegalTokenError | None = None
        self.token: OAuthBearerUnsecuredJws | None = None

    @property
    def authorization_id(self) -> str | None:
        return None if self.token is None else self.token.principal_name

    def evaluate_response(self, response: bytes | memoryview) -> bytes:
        """The challenge: empty on success, the JSON error for a refused token.
        SaslAuthenticationError (the client's message) or SaslError (logged only)."""
        error, self._error = self._error, None
        if error is not None and bytes(response) == CONTROL_A:
            raise SaslAuthenticationError(json_error_response(error)) from error
        try:
            initial = OAuthBearerClientInitialResponse.parse(response)
        except SaslMessageError as e:
            raise SaslError(str(e)) from None
        try:
            token = self._validator.validate(initial.token_value, self._clock_ms())
        except OAuthBearerIllegalTokenError as e:
            self._error = e
            return json_error_response(e).encode()
        if initial.authorization_id and initial.authorization_id != token.principal_name:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id "
                f"({initial.authorization_id}) that is different from the token's principal "
                f"name ({token.principal_name})"
            )
        self.token = token
        return b""
