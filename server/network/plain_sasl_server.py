"""PlainSaslServer: the server side of SASL/PLAIN (RFC 4616), as Kafka's `PlainSaslServer`
with its default `PlainServerCallbackHandler` (the JAAS `user_<name>` options).

The client's single message is ``[authzid] NUL authcid NUL passwd`` in UTF-8. Kafka splits
it into at most four parts on NUL and wants exactly three; an empty user name or password,
an unknown user, a wrong password, or an authorization id other than the user name fails
with Kafka's messages, which the client sees in SaslAuthenticate's error_message. The
password compare takes the same time however much of it matches
(Kafka's `Utils.isEqualConstantTime`). Stateless; any thread.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

__all__ = ["PlainSaslServer", "SaslAuthenticationError"]


class SaslAuthenticationError(Exception):
    """Kafka's SaslAuthenticationException: the message goes back to the client."""


class PlainSaslServer:
    """Checks PLAIN tokens against `users` ({user name: password})."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = {name: password.encode() for name, password in users.items()}

    def evaluate_response(self, response: bytes | memoryview) -> str:
        """The authenticated user name (the authorization id); SaslAuthenticationError
        if the token is malformed or the credentials are wrong."""
        # Java's new String(bytes, UTF_8) replaces malformed input rather than failing.
        parts = bytes(response).decode("utf-8", errors="replace").split("\0", 3)
        if len(parts) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}"
            )
        authorization_id, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        if expected is None or not hmac.compare_digest(password.encode(), expected):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authorization_id and authorization_id != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        return username
