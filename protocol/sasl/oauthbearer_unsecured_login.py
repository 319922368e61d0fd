"""The unsecured token a client logs in with over OAUTHBEARER, made from its JAAS options
as Kafka's `OAuthBearerUnsecuredLoginCallbackHandler` makes it, and the client's initial
response carrying it (Kafka's `OAuthBearerSaslClient`).

Options (all optional, none required but at least one not an extension):
``unsecuredLoginStringClaim_<name>="value"``, ``unsecuredLoginNumberClaim_<name>="1"``,
``unsecuredLoginListClaim_<name>=",a,b"`` (the first character is the delimiter),
``unsecuredLoginPrincipalClaimName`` (default ``sub``), ``unsecuredLoginScopeClaimName``
(default ``scope``), ``unsecuredLoginLifetimeSeconds`` (default 3600) and
``unsecuredLoginExtension_<name>="value"`` (KIP-342 SASL extensions). `iat` is now and
`exp` now plus the lifetime; neither may be set as a claim. Stateless; any thread.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from tiercel.protocol.sasl.oauthbearer_client_initial_response import (
    OAuthBearerClientInitialResponse,
    SaslMessageError,
)
from tiercel.protocol.sasl.oauthbearer_unsecured_jws import (
    OAuthBearerIllegalTokenError,
    OAuthBearerUnsecuredJws,
)

__all__ = [
    "OAuthBearerConfigError",
    "client_initial_response",
    "login_extensions",
    "unsecured_login_token",
]

_PREFIX: Final = "unsecuredLogin"
_STRING_CLAIM: Final = f"{_PREFIX}StringClaim_"
_NUMBER_CLAIM: Final = f"{_PREFIX}NumberClaim_"
_LIST_CLAIM: Final = f"{_PREFIX}ListClaim_"
_EXTENSION: Final = f"{_PREFIX}Extension_"
_RESERVED_CLAIMS: Final = frozenset({"iat", "exp"})


class OAuthBearerConfigError(ValueError):
    """Kafka's OAuthBearerConfigException: the login options cannot make a token."""


def unsecured_login_token(options: Mapping[str, str], now_ms: int) -> OAuthBearerUnsecuredJws:
    """Kafka's OAuthBearerUnsecuredLoginCallbackHandler.handleTokenCallback."""
    if not options:
        raise OAuthBearerConfigError(
            "Token not provided, this login cannot be used to establish client connections"
        )
    if all(name.startswith(_EXTENSION) for name in options):
        raise OAuthBearerConfigError("Extensions provided in login context without a token")
    principal_claim_name = options.get(f"{_PREFIX}PrincipalClaimName", "").strip() or "sub"
    scope_claim_name = options.get(f"{_PREFIX}ScopeClaimName", "").strip() or "scope"
    try:
        lifetime_s = int(options.get(f"{_PREFIX}LifetimeSeconds", "3600"))
    except ValueError as e:
        raise OAuthBearerConfigError(str(e)) from None
    claims: dict[str, object] = {"exp": now_ms / 1000 + lifetime_s, "iat": now_ms / 1000}
    claims.update(_claims(options))
    header = _base64url(json.dumps({"alg": "none"}, separators=(",", ":")))
    payload = _base64url(json.dumps(claims, separators=(",", ":")))
    try:
        return OAuthBearerUnsecuredJws.parse(
            f"{header}.{payload}.", principal_claim_name, scope_claim_name
        )
    except OAuthBearerIllegalTokenError as e:
        # The principal claim is missing or blank.
        raise OAuthBearerConfigError(str(e)) from None


def login_extensions(options: Mapping[str, str]) -> Mapping[str, str]:
    """Kafka's handleExtensionsCallback: the `unsecuredLoginExtension_` options."""
    return MappingProxyType(
        {k[len(_EXTENSION) :]: v for k, v in options.items() if k.startswith(_EXTENSION)}
    )


def client_initial_response(options: Mapping[str, str], now_ms: int) -> bytes:
    """The client's first message with a fresh token (Kafka's OAuthBearerSaslClient
    in its SEND_CLIENT_FIRST_MESSAGE state); OAuthBearerConfigError if the options
    cannot make one."""
    token = unsecured_login_token(options, now_ms)
    try:
        response = OAuthBearerClientInitialResponse(token.value, "", login_extensions(options))
    except SaslMessageError as e:
        raise OAuthBearerConfigError(str(e)) from None
    return response.to_bytes()


def _claims(options: Mapping[str, str]) -> dict[str, object]:
    claims: dict[str, object] = {}
    for key, value in options.items():
        for prefix in (_STRING_CLAIM, _NUMBER_CLAIM, _LIST_CLAIM):
            if key.startswith(prefix) and len(key) > len(prefix):
                name = key[len(prefix) :]
                if name in _RESERVED_CLAIMS:
                    raise OAuthBearerConfigError(f"Cannot explicitly set the '{name}' claim")
                claims[name] = _claim_value(prefix, value)
    return claims


def _claim_value(prefix: str, value: str) -> object:
    if prefix == _STRING_CLAIM:
        return value
    if prefix == _NUMBER_CLAIM:
        try:
            return float(value)
        except ValueError as e:
            raise OAuthBearerConfigError(str(e)) from None
    return _list(value)


def _list(value: str) -> list[str]:
    """Kafka's listJsonText: the first character delimits the rest; an empty element
    anywhere (Java's split drops trailing ones) is kept once, as Kafka appends one."""
    if len(value) <= 1:
        return []
    delimiter, text = value[0], value[1:]
    elements = text.split(delimiter)
    while len(elements) > 1 and not elements[-1]:
        elements.pop()
    if text.startswith(delimiter) or text.endswith(delimiter) or delimiter * 2 in text:
        elements.append("")
    return elements


def _base64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()
