"""ScramSaslServer: the server side of SASL/SCRAM-SHA-256 and -512 (RFC 5802, RFC 7677),
as Kafka's `ScramSaslServer`.

Two client messages: the client-first (user name, client nonce) is answered with the
server-first (the nonce extended by the server's, the user's salt and iterations); the
client-final (proof) is checked and answered with the server-final (server signature),
after which `authorization_id` is the user. The proof check recomputes StoredKey from the
proof and compares it with the stored one in constant time (Kafka's MessageDigest.isEqual).

Failures are Kafka's two kinds: `SaslAuthenticationError` carries a message the client may
see (a foreign authorization id); `SaslError` carries the reason for the log only, and
the client is told just that its credentials were invalid, so an unknown user and a
wrong password look the same (SaslServerAuthenticator.handleSaslToken). A client-first
with `tokenauth=true` asks for delegation-token authentication (KIP-48); Tiercel has no
delegation tokens, so no token id is ever valid. One instance per connection; event-loop
only.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Callable

from tiercel.protocol.sasl.scram_credential import ScramCredentialData
from tiercel.protocol.sasl.scram_formatter import ScramMechanism, secure_random_string, username
from tiercel.protocol.sasl.scram_messages import (
    ClientFinalMessage,
    ClientFirstMessage,
    ScramMessageError,
    ServerFirstMessage,
    auth_message,
    server_final_message,
)
from tiercel.server.network.credential_cache import CredentialCache
from tiercel.server.network.plain_sasl_server import SaslAuthenticationError

__all__ = ["SaslError", "ScramSaslServer"]

_TOKEN_AUTH = "tokenauth"


class SaslError(Exception):
    """Kafka's javax.security.sasl.SaslException: the reason is logged, never sent."""


class _State(enum.Enum):
    RECEIVE_CLIENT_FIRST_MESSAGE = enum.auto()
    RECEIVE_CLIENT_FINAL_MESSAGE = enum.auto()
    COMPLETE = enum.auto()
    FAILED = enum.auto()


class ScramSaslServer:
    """Invariant: `authorization_id` is None until the exchange is COMPLETE."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        credentials: CredentialCache,
        server_nonce: Callable[[], str] = secure_random_string,
    ) -> None:
        self.mechanism = mechanism
        self._server_nonce = server_nonce
        self._credentials = credentials
        self._state = _State.RECEIVE_CLIENT_FIRST_MESSAGE
        self._client_first: ClientFirstMessage | None = None
        self._server_first: ServerFirstMessage | None = None
        self._credential: ScramCredentialData | None = None
        self._user = ""
        self.authorization_id: str | None = None

    def evaluate_response(self, response: bytes | memoryview) -> bytes:
        """The challenge to send back; SaslError or SaslAuthenticationError on failure,
        after which the exchange is FAILED."""
        try:
            if self._state is _State.RECEIVE_CLIENT_FIRST_MESSAGE:
                return self._client_first_message(response)
            if self._state is _State.RECEIVE_CLIENT_FINAL_MESSAGE:
                return self._client_final_message(response)
            raise SaslError(f"Unexpected challenge in Sasl server state {self._state.name}")
        except (SaslError, SaslAuthenticationError):
            self._clear()
            self._state = _State.FAILED
            raise
        except ScramMessageError as e:
            self._clear()
            self._state = _State.FAILED
            raise SaslError(str(e)) from None

    def _client_first_message(self, response: bytes | memoryview) -> bytes:
        client_first = ClientFirstMessage.parse(response)
        # The grammar admits only saslnames whose '=' are escapes, so this cannot fail.
        user = username(client_first.sasl_name)
        if client_first.extensions.get(_TOKEN_AUTH, "").lower() == "true":
            # DelegationTokenCredentialCallback finds no owner: there are no tokens.
            raise SaslError(f"Token Authentication failed: Invalid tokenId : {user}")
        credential = self._credentials.scram_credential(self.mechanism, user)
        if credential is None:
            raise SaslError("Authentication failed: Invalid user credentials")
        if client_first.authorization_id and client_first.authorization_id != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        if credential.iterations < self.mechanism.min_iterations:
            raise SaslError(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{self.mechanism.min_iterations} for {self.mechanism.name}"
            )
        self._client_first, self._credential, self._user = client_first, credential, user
        self._server_first = ServerFirstMessage(
            client_first.nonce + self._server_nonce(), credential.salt, credential.iterations
        )
        self._state = _State.RECEIVE_CLIENT_FINAL_MESSAGE
        return self._server_first.to_message().encode()

    def _client_final_message(self, response: bytes | memoryview) -> bytes:
        client_first, server_first, credential = (
            self._client_first,
            self._server_first,
            self._credential,
        )
        assert client_first is not None and server_first is not None and credential is not None
        client_final = ClientFinalMessage.parse(response)
        # Kafka checks endsWith, not equality: the whole nonce is what RFC 5802 wants, and
        # the server's part (what a replay could not know) is checked either way.
        if not client_final.nonce.endswith(server_first.nonce):
            raise SaslError("Invalid client nonce in the final client message.")
        message = auth_message(client_first, server_first, client_final)
        client_signature = self.mechanism.hmac(credential.stored_key, message)
        if len(client_final.proof) != len(client_signature):
            raise SaslError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(client_signature, client_final.proof, strict=True))
        if not hmac.compare_digest(self.mechanism.hash(client_key), credential.stored_key):
            raise SaslError("Invalid client credentials")
        server_signature = self.mechanism.hmac(credential.server_key, message)
        self.authorization_id = self._user
        self._clear()
        self._state = _State.COMPLETE
        return server_final_message(server_signature)

    def _clear(self) -> None:
        self._client_first = self._server_first = self._credential = None
