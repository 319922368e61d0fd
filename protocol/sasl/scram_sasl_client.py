"""ScramSaslClient: the client side of SASL/SCRAM (RFC 5802), as Kafka's `ScramSaslClient`,
with which a broker logs in to another broker's SCRAM inter-broker listener and the Spark
source's broker tail to a SCRAM listener.

`first_message` sends the user and a fresh nonce; `final_message` takes the server-first
message, derives the proof from the password and the server's salt and iterations, and
`verify_server_final` checks the server's signature, so the client knows the server holds
the user's credential (mutual authentication). The iterations a server asks for must be
at least the mechanism's minimum, as Kafka's client checks, and at most 16384, the most a
credential may have. One instance per login; any thread.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from typing import Final

from tiercel.protocol.sasl.scram_formatter import (
    MAX_ITERATIONS,
    ScramMechanism,
    sasl_name,
    secure_random_string,
)
from tiercel.protocol.sasl.scram_messages import (
    ClientFinalMessage,
    ClientFirstMessage,
    ScramMessageError,
    ServerFirstMessage,
    auth_message,
)

__all__ = ["ScramSaslClient"]

_SERVER_FIRST: Final = re.compile(r"(?:m=[^,]+,)?r=(?P<nonce>[^,]+),s=(?P<salt>[^,]*),i=(?P<i>\d+)")
_SERVER_FINAL: Final = re.compile(r"v=(?P<signature>[A-Za-z0-9+/=]+)(?:,.*)?|e=(?P<error>[^,]+)")


class ScramSaslClient:
    def __init__(self, mechanism: ScramMechanism, username: str, password: str) -> None:
        self._mechanism = mechanism
        self._password = password
        self._client_first = ClientFirstMessage(sasl_name(username), secure_random_string(), "", {})
        self._server_signature = b""

    def first_message(self) -> bytes:
        return self._client_first.to_message().encode()

    def final_message(self, server_first_message: bytes) -> bytes:
        """ScramMessageError if the server-first message is malformed, its nonce does not
        extend ours or its iterations are out of bounds."""
        text = server_first_message.decode("utf-8", errors="replace")
        match = _SERVER_FIRST.fullmatch(text)
        if match is None:
            raise ScramMessageError(f"Invalid SCRAM server first message format: {text}")
        iterations = int(match["i"])
        if not match["nonce"].startswith(self._client_first.nonce):
            raise ScramMessageError("Invalid server nonce: does not start with client nonce")
        if iterations < self._mechanism.min_iterations:
            raise ScramMessageError(
                f"Requested iterations {iterations} is less than the minimum "
                f"{self._mechanism.min_iterations} for {self._mechanism.name}"
            )
        # Kafka's client has no upper bound; this one runs Hi on the broker's event loop,
        # so a server may not make it spin longer than any credential could need.
        if iterations > MAX_ITERATIONS:
            raise ScramMessageError(
                f"Requested iterations {iterations} is more than the maximum "
                f"{MAX_ITERATIONS} for {self._mechanism.name}"
            )
        try:
            salt = base64.b64decode(match["salt"], validate=True)
        except binascii.Error:
            raise ScramMessageError(f"Invalid SCRAM server first message format: {text}") from None
        server_first = ServerFirstMessage(match["nonce"], salt, iterations)
        mechanism = self._mechanism
        salted = mechanism.salted_password(self._password, server_first.salt, iterations)
        without_proof = ClientFinalMessage(b"n,,", server_first.nonce, b"")
        message = auth_message(self._client_first, server_first, without_proof)
        client_key = mechanism.client_key(salted)
        signature = mechanism.hmac(mechanism.stored_key(client_key), message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = mechanism.hmac(mechanism.server_key(salted), message)
        return ClientFinalMessage(b"n,,", server_first.nonce, proof).to_message().encode()

    def verify_server_final(self, server_final_message: bytes) -> None:
        """ScramMessageError unless the message carries the signature we expect."""
        text = server_final_message.decode("utf-8", errors="replace")
        match = _SERVER_FINAL.fullmatch(text)
        if match is None:
            raise ScramMessageError(f"Invalid SCRAM server final message format: {text}")
        if match["error"] is not None:
            raise ScramMessageError(
                f"Sasl authentication using {self._mechanism.name} failed with "
                f"error: {match['error']}"
            )
        if not hmac.compare_digest(base64.b64decode(match["signature"]), self._server_signature):
            raise ScramMessageError("Invalid server signature in server final message")
