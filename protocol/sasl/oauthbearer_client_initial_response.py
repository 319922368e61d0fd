"""The OAUTHBEARER client initial response (RFC 7628 §3.1), parsed and written as Kafka's
`OAuthBearerClientInitialResponse`, with the same grammar and messages.

    n,[a=authzid],%x01 key=value%x01 ... auth=Bearer <token>%x01 ... %x01

The GS2 header is "n" (no channel binding) with an optional authorization id (a SCRAM-
style saslname); then key/value pairs, each ended by %x01, then a final %x01. `auth` is
required and must be the Bearer scheme (any case) with an RFC 6750 token; every other
pair is a SASL extension (KIP-342), whose names are letters only. A client that got an
error challenge answers with a lone %x01 (`CONTROL_A`), not an initial response. Values;
any thread.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

__all__ = [
    "CONTROL_A",
    "OAuthBearerClientInitialResponse",
    "SaslMessageError",
    "validate_extensions",
]

SEPARATOR: Final = "\x01"
# OAuthBearerSaslClient.BYTE_CONTROL_A: the client's answer to the server's error challenge.
CONTROL_A: Final = b"\x01"
AUTH_KEY: Final = "auth"
# Kafka's patterns; Java's [\x01-\x7F&&[^=,]] written out.
_SASLNAME: Final = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_KEY: Final = "[A-Za-z]+"
_VALUE: Final = "[\\x21-\\x7E \t\r\n]+"
_KVPAIRS: Final = f"(?:{_KEY}={_VALUE}{SEPARATOR})*"
_AUTH: Final = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)", re.ASCII)
_CLIENT_INITIAL_RESPONSE: Final = re.compile(
    f"n,(?:a=(?P<authzid>{_SASLNAME}))?,{SEPARATOR}(?P<kvpairs>{_KVPAIRS}){SEPARATOR}"
)
_EXTENSION_KEY: Final = re.compile(_KEY)
_EXTENSION_VALUE: Final = re.compile(_VALUE)


class SaslMessageError(Exception):
    """Kafka's SaslException for a malformed message; the reason is logged, not sent."""


def validate_extensions(extensions: Mapping[str, str]) -> None:
    """Kafka's OAuthBearerClientInitialResponse.validateExtensions."""
    if AUTH_KEY in extensions:
        raise SaslMessageError(f"Extension name {AUTH_KEY} is invalid")
    for name, value in extensions.items():
        if _EXTENSION_KEY.fullmatch(name) is None:
            raise SaslMessageError(f"Extension name {name} is invalid")
        if _EXTENSION_VALUE.fullmatch(value) is None:
            raise SaslMessageError(f"Extension value ({value}) for extension {name} is invalid")


@dataclass(frozen=True, slots=True)
class OAuthBearerClientInitialResponse:
    """Invariant: `extensions` pass `validate_extensions`. Immutable."""

    token_value: str
    authorization_id: str = ""
    extensions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        validate_extensions(self.extensions)

    def __repr__(self) -> str:
        # The token is a credential: never print it.
        return f"OAuthBearerClientInitialResponse(authzid={self.authorization_id!r})"

    @classmethod
    def parse(cls, response: bytes | memoryview) -> OAuthBearerClientInitialResponse:
        # Java's new String(bytes, UTF_8) replaces malformed input rather than failing.
        text = bytes(response).decode("utf-8", errors="replace")
        match = _CLIENT_INITIAL_RESPONSE.fullmatch(text)
        if match is None:
            raise SaslMessageError("Invalid OAUTHBEARER client first message")
        pairs = match["kvpairs"]
        properties = dict(p.split("=", 1) for p in pairs.split(SEPARATOR) if p) if pairs else {}
        auth = properties.pop(AUTH_KEY, None)
        if auth is None:
            raise SaslMessageError("Invalid OAUTHBEARER client first message: 'auth' not specified")
        validate_extensions(properties)
        auth_match = _AUTH.fullmatch(auth)
        if auth_match is None:
            raise SaslMessageError(
                "Invalid OAUTHBEARER client first message: invalid 'auth' format"
            )
        if auth_match["scheme"].lower() != "bearer":
            raise SaslMessageError(
                f"Invalid scheme in OAUTHBEARER client first message: {auth_match['scheme']}"
            )
        return cls(auth_match["token"], match["authzid"] or "", MappingProxyType(properties))

    def to_bytes(self) -> bytes:
        """Kafka's toBytes: the extensions follow the auth pair, in their given order."""
        authzid = f"a={self.authorization_id}" if self.authorization_id else ""
        extensions = "".join(f"{SEPARATOR}{k}={v}" for k, v in self.extensions.items())
        message = f"n,{authzid},{SEPARATOR}auth=Bearer {self.token_value}{extensions}"
        return f"{message}{SEPARATOR}{SEPARATOR}".encode()
