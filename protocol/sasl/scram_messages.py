"""The four SCRAM messages (RFC 5802 §7), parsed and written as Kafka's `ScramMessages`,
with the same grammar and messages.

    client-first  n,[a=authzid],[m=reserved,]n=saslname,r=nonce[,ext=value]...
    server-first  r=client-nonce+server-nonce,s=base64 salt,i=iterations
    client-final  c=base64 gs2 header,r=nonce[,ext=value]...,p=base64 proof
    server-final  v=base64 server signature   (or e=error)

Only the gs2 header "n" is accepted (no channel binding), as Kafka. The extensions of
the client-first message are KIP-48's (`tokenauth=true` for a delegation token). Values;
any thread.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = [
    "ClientFinalMessage",
    "ClientFirstMessage",
    "ScramMessageError",
    "ServerFirstMessage",
    "auth_message",
    "server_final_message",
]

# Kafka's AbstractScramMessage patterns (Java's [\x01-\x7F&&[^,]] written out).
_SAFE_CHAR: Final = r"[\x01-\x2B\x2D-\x3C\x3E-\x7F]"
_VALUE: Final = r"[\x01-\x2B\x2D-\x7F]+"
_PRINTABLE: Final = r"[\x21-\x2B\x2D-\x7E]+"
_SASLNAME: Final = rf"(?:{_SAFE_CHAR}|=2C|=3D)+"
_B64: Final = "[a-zA-Z0-9/+]"
_BASE64: Final = rf"(?:{_B64}{{4}})*(?:{_B64}{{3}}=|{_B64}{{2}}==)?"
_RESERVED: Final = rf"(?:m={_VALUE},)?"
_EXTENSIONS: Final = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST: Final = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{_RESERVED}n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS})"
)
_CLIENT_FINAL: Final = re.compile(
    rf"c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS},p=(?P<proof>{_BASE64})"
)


class ScramMessageError(Exception):
    """A malformed SCRAM message (Kafka's SaslException from ScramMessages)."""


def _text(message: bytes | memoryview) -> str:
    # Java's new String(bytes, UTF_8) replaces malformed input rather than failing.
    return bytes(message).decode("utf-8", errors="replace")


def _b64(text: str) -> bytes:
    """Text the grammar's BASE64 matched, which always decodes."""
    return base64.b64decode(text, validate=True)


@dataclass(frozen=True, slots=True)
class ClientFirstMessage:
    sasl_name: str
    nonce: str
    authorization_id: str
    extensions: Mapping[str, str]

    @classmethod
    def parse(cls, message: bytes | memoryview) -> ClientFirstMessage:
        text = _text(message)
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise ScramMessageError(f"Invalid SCRAM client first message format: {text}")
        extensions = match["extensions"]
        return cls(
            match["saslname"],
            match["nonce"],
            match["authzid"] or "",
            MappingProxyType(_parse_extensions(extensions[1:]) if extensions else {}),
        )

    def bare(self) -> str:
        """client-first-message-bare as Kafka rebuilds it for the AuthMessage."""
        extensions = ",".join(f"{k}={v}" for k, v in self.extensions.items())
        bare = f"n={self.sasl_name},r={self.nonce}"
        return f"{bare},{extensions}" if extensions else bare

    def to_message(self) -> str:
        return f"n,{self.authorization_id},{self.bare()}"


def _parse_extensions(text: str) -> dict[str, str]:
    """Kafka's ScramExtensions: comma-separated key=value pairs (a later key wins)."""
    pairs = (item.split("=", 1) for item in text.split(","))
    return {key: value for key, value in pairs}


@dataclass(frozen=True, slots=True)
class ServerFirstMessage:
    nonce: str
    salt: bytes
    iterations: int

    def to_message(self) -> str:
        return f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={self.iterations}"


@dataclass(frozen=True, slots=True)
class ClientFinalMessage:
    channel_binding: bytes
    nonce: str
    proof: bytes

    @classmethod
    def parse(cls, message: bytes | memoryview) -> ClientFinalMessage:
        text = _text(message)
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise ScramMessageError(f"Invalid SCRAM client final message format: {text}")
        return cls(_b64(match["channel"]), match["nonce"], _b64(match["proof"]))

    def without_proof(self) -> str:
        return f"c={base64.b64encode(self.channel_binding).decode()},r={self.nonce}"

    def to_message(self) -> str:
        return f"{self.without_proof()},p={base64.b64encode(self.proof).decode()}"


def auth_message(
    client_first: ClientFirstMessage,
    server_first: ServerFirstMessage,
    client_final: ClientFinalMessage,
) -> bytes:
    """RFC 5802's AuthMessage (ScramFormatter.authMessage)."""
    return (
        f"{client_first.bare()},{server_first.to_message()},{client_final.without_proof()}"
    ).encode()


def server_final_message(server_signature: bytes) -> bytes:
    return b"v=" + base64.b64encode(server_signature)
