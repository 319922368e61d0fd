"""An unsecured JWS (RFC 7515 compact serialization with `alg` "none", RFC 7519 claims),
parsed as Kafka's `OAuthBearerUnsecuredJws`, with the same checks and messages.

    base64url(header JSON) "." base64url(claims JSON) "."      (empty signature)

The header's `alg` must be "none" and the signature empty. `exp` (seconds since the
epoch, a number) is required and becomes `lifetime_ms`; the principal claim (`sub` unless
configured) must be a non-blank string; `iat`, when present, becomes `start_time_ms`;
the scope claim (`scope` unless configured) is one string or a list of strings. Claim
values are kept as Kafka's Jackson conversion leaves them: numbers as numbers, arrays as
lists of text, anything else as its text. Values; any thread.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = [
    "OAuthBearerIllegalTokenError",
    "OAuthBearerUnsecuredJws",
    "java_type_name",
    "to_map",
]

_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]*={0,2}")


class OAuthBearerIllegalTokenError(ValueError):
    """Kafka's OAuthBearerIllegalTokenException; `failure_scope` is set when the token
    lacks a required scope (Kafka's OAuthBearerValidationResult.failureScope)."""

    def __init__(self, description: str, failure_scope: str | None = None) -> None:
        super().__init__(description)
        self.failure_scope = failure_scope


def java_type_name(value: object) -> str:
    """The simple name of the Java class Kafka's Jackson conversion gives a claim value,
    for Kafka's messages."""
    if isinstance(value, list):
        return "ArrayList"
    if isinstance(value, float):
        return "Double"
    if isinstance(value, int):
        return "Integer" if -(2**31) <= value < 2**31 else "Long"
    return "String"


def _convert(value: object) -> object:
    """Kafka's OAuthBearerUnsecuredJws.convert: arrays to lists of text, numbers kept,
    anything else as Jackson's asText."""
    if isinstance(value, list):
        return [_as_text(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return _as_text(value)


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return ""
    return str(value)


def to_map(split: str) -> Mapping[str, object]:
    """One base64url-encoded JSON object (Kafka's OAuthBearerUnsecuredJws.toMap). RFC 7515
    omits the padding; it is accepted when present. Anything but an object is malformed
    (Jackson would hand Kafka no fields, and its header check would then fail on the
    missing `alg` with a NullPointerException)."""
    if _BASE64URL.fullmatch(split) is None:
        raise OAuthBearerIllegalTokenError("malformed Base64 URL encoded value")
    unpadded = split.rstrip("=")
    try:
        decoded = base64.urlsafe_b64decode(unpadded + "=" * (-len(unpadded) % 4))
    except (binascii.Error, ValueError):
        raise OAuthBearerIllegalTokenError("malformed Base64 URL encoded value") from None
    try:
        node = json.loads(decoded)
    except (UnicodeDecodeError, ValueError):
        raise OAuthBearerIllegalTokenError("malformed JSON") from None
    if not isinstance(node, dict):
        raise OAuthBearerIllegalTokenError("malformed JSON")
    return MappingProxyType({str(k): _convert(v) for k, v in node.items()})


def _seconds_to_ms(seconds: float) -> int:
    # Java's Math.round: floor(x + 0.5).
    return math.floor(seconds * 1000 + 0.5)


@dataclass(frozen=True, slots=True)
class OAuthBearerUnsecuredJws:
    """Invariant: built only by `parse`, so every field holds what Kafka's constructor
    checked. Immutable."""

    value: str
    header: Mapping[str, object]
    claims: Mapping[str, object]
    principal_claim_name: str
    scope_claim_name: str
    principal_name: str
    lifetime_ms: int
    start_time_ms: int | None
    scope: frozenset[str]

    def __repr__(self) -> str:
        # The token is a credential: name its principal, not its value.
        return f"OAuthBearerUnsecuredJws(principal={self.principal_name!r})"

    @classmethod
    def parse(
        cls, compact_serialization: str, principal_claim_name: str, scope_claim_name: str
    ) -> OAuthBearerUnsecuredJws:
        """OAuthBearerIllegalTokenError for a token Kafka refuses; ValueError for a blank
        claim name (a configuration error, Kafka's IllegalArgumentException)."""
        if ".." in compact_serialization:
            raise OAuthBearerIllegalTokenError("Malformed compact serialization contains '..'")
        splits = _splits(compact_serialization)
        header, claims = to_map(splits[0]), to_map(splits[1])
        if str(header.get("alg")) != "none":
            raise OAuthBearerIllegalTokenError("Unsecured JWS must have 'none' for an algorithm")
        if splits[2]:
            raise OAuthBearerIllegalTokenError("Unsecured JWS must not contain a digital signature")
        principal_claim_name, scope_claim_name = (
            principal_claim_name.strip(),
            scope_claim_name.strip(),
        )
        if not principal_claim_name:
            raise ValueError("Must specify a non-blank principal claim name")
        if not scope_claim_name:
            raise ValueError("Must specify a non-blank scope claim name")
        scope = _scope(claims, scope_claim_name)
        expiration = _number_claim(claims, "exp")
        if expiration is None:
            raise OAuthBearerIllegalTokenError("No expiration time in JWT")
        principal = _claim(claims, principal_claim_name, "String")
        if not isinstance(principal, str) or not principal.strip():
            raise OAuthBearerIllegalTokenError(
                f"No principal name in JWT claim: {principal_claim_name}"
            )
        issued_at = _number_claim(claims, "iat")
        return cls(
            compact_serialization,
            header,
            claims,
            principal_claim_name,
            scope_claim_name,
            principal,
            _seconds_to_ms(expiration),
            None if issued_at is None else _seconds_to_ms(issued_at),
            scope,
        )

    @property
    def expiration_time(self) -> float:
        """`exp` in seconds; parse made sure it is a number."""
        value = _number_claim(self.claims, "exp")
        assert value is not None
        return value

    @property
    def issued_at(self) -> float | None:
        """`iat` in seconds, if present; parse made sure it is a number."""
        return _number_claim(self.claims, "iat")


def _splits(compact_serialization: str) -> list[str]:
    """Java's String.split drops trailing empty strings; Kafka adds back the one
    signature an unsecured JWS ends with."""
    splits = compact_serialization.split(".")
    while splits and not splits[-1]:
        splits.pop()
    if compact_serialization.endswith("."):
        splits.append("")
    if len(splits) != 3:
        raise OAuthBearerIllegalTokenError(
            "Unsecured JWS compact serializations must have 3 dot-separated "
            "Base64URL-encoded values"
        )
    return splits


def _claim(claims: Mapping[str, object], name: str, type_name: str) -> object:
    """Kafka's OAuthBearerUnsecuredJws.claim: the value if it is of the Java type named
    (Number, String or List), None if absent."""
    value = claims.get(name)
    if value is None:
        return None
    if java_type_name(value) not in _JAVA_TYPES[type_name]:
        raise OAuthBearerIllegalTokenError(
            f"The '{name}' claim was not of type {type_name}: {java_type_name(value)}"
        )
    return value


_JAVA_TYPES: Final = {
    "Number": ("Integer", "Long", "Double"),
    "String": ("String",),
    "List": ("ArrayList",),
}


def _number_claim(claims: Mapping[str, object], name: str) -> float | None:
    value = _claim(claims, name, "Number")
    assert value is None or isinstance(value, (int, float))
    return value


def _scope(claims: Mapping[str, object], name: str) -> frozenset[str]:
    """Kafka's calculateScope: one string claim, or a list of them; blanks dropped."""
    value = claims.get(name)
    if isinstance(value, str):
        return frozenset([value.strip()]) if value.strip() else frozenset()
    scope = _claim(claims, name, "List")
    assert scope is None or isinstance(scope, list)
    return frozenset(s.strip() for s in scope or () if s.strip())
