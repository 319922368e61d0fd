"""PlainSaslServer against the cases of Kafka's PlainSaslServerTest and the token rules of
PlainSaslServer.extractTokens (RFC 4616), with Kafka's messages."""

from __future__ import annotations

import re

import pytest

from tiercel.server.network.plain_sasl_server import PlainSaslServer, SaslAuthenticationError

_SERVER = PlainSaslServer({"alice": "alice-secret", "émile": "pässword"})


@pytest.mark.parametrize(
    "token",
    [b"\0alice\0alice-secret", b"alice\0alice\0alice-secret"],
    ids=["no authorization id", "authorization id equal to the user"],
)
def test_valid_credentials(token: bytes) -> None:
    assert _SERVER.evaluate_response(token) == "alice"


def test_utf8_user_and_password() -> None:
    assert _SERVER.evaluate_response("\0émile\0pässword".encode()) == "émile"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0bob\0alice-secret", "Authentication failed: Invalid username or password"),
        (b"\0alice\0alice-secre", "Authentication failed: Invalid username or password"),
        (
            b"bob\0alice\0alice-secret",
            "Authentication failed: Client requested an authorization id that is different "
            "from username",
        ),
        (b"\0\0alice-secret", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"alice\0alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"a\0alice\0alice-secret\0x", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"a\0b\0c\0d\0e", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    ],
)
def test_refused_tokens(token: bytes, message: str) -> None:
    with pytest.raises(SaslAuthenticationError, match=f"^{re.escape(message)}$"):
        _SERVER.evaluate_response(token)
