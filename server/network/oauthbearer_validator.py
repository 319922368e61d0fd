"""OAuthBearerUnsecuredValidator: Kafka's default OAUTHBEARER token check on a broker,
`OAuthBearerUnsecuredValidatorCallbackHandler` with `OAuthBearerValidationUtils`.

The token must be an unsecured JWS (`OAuthBearerUnsecuredJws`) whose principal claim
(`unsecuredValidatorPrincipalClaimName`, default `sub`) is a string; `iat`, if present,
not after now plus the allowed clock skew (`unsecuredValidatorAllowableClockSkewMs`,
default 0); `exp` after now minus that skew; `exp` after `iat`; and whose scope (claim
`unsecuredValidatorScopeClaimName`, default `scope`) holds every space-separated element
of `unsecuredValidatorRequiredScope`. A failure raises OAuthBearerIllegalTokenError with
Kafka's description, which the broker logs; the client is told only the RFC 6750 status
(`error_status`). This checks the token's form and times only: anyone can make an
unsecured token, which is why Kafka calls it unsuitable for production. Immutable
after construction; any thread.
"""

from __future__ import annotations

from tiercel.config.oauthbearer_config import OAuthBearerValidatorOptions
from tiercel.protocol.sasl.oauthbearer_unsecured_jws import (
    OAuthBearerIllegalTokenError,
    OAuthBearerUnsecuredJws,
    java_type_name,
)

__all__ = ["OAuthBearerUnsecuredValidator", "error_status", "json_error_response"]


class OAuthBearerUnsecuredValidator:
    """Validates token values against the options of the listener's
    OAuthBearerLoginModule entry."""

    def __init__(self, options: OAuthBearerValidatorOptions) -> None:
        self.principal_claim_name = options.principal_claim_name
        self.scope_claim_name = options.scope_claim_name
        self.required_scope = options.required_scope
        self.allowable_clock_skew_ms = options.allowable_clock_skew_ms

    def validate(self, token_value: str, now_ms: int) -> OAuthBearerUnsecuredJws:
        """Kafka's handleCallback: the token, or OAuthBearerIllegalTokenError."""
        jws = OAuthBearerUnsecuredJws.parse(
            token_value, self.principal_claim_name, self.scope_claim_name
        )
        principal = jws.claims.get(self.principal_claim_name)
        if not isinstance(principal, str):
            raise OAuthBearerIllegalTokenError(
                f"The {self.principal_claim_name} claim had the incorrect type: "
                f"{java_type_name(principal)}"
            )
        skew = self.allowable_clock_skew_ms
        issued_at, expiration = jws.issued_at, jws.expiration_time
        if issued_at is not None and 1000 * issued_at > now_ms + skew:
            raise OAuthBearerIllegalTokenError(
                f"The Issued At value ({issued_at:f} seconds) was after the indicated time "
                f"({now_ms} ms) plus allowable clock skew ({skew} ms)"
            )
        if now_ms - skew >= 1000 * expiration:
            raise OAuthBearerIllegalTokenError(
                f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew} ms) was "
                f"on or after the Expiration Time value ({expiration:f} seconds)"
            )
        if issued_at is not None and expiration <= issued_at:
            raise OAuthBearerIllegalTokenError(
                f"The Expiration Time time ({expiration:f} seconds) was not after the Issued "
                f"At time ({issued_at:f} seconds)"
            )
        self._validate_scope(jws.scope)
        return jws

    def _validate_scope(self, scope: frozenset[str]) -> None:
        """OAuthBearerValidationUtils.validateScope; Java's Set and List print as [a, b]
        (the set sorted here, where Java's HashSet order is arbitrary)."""
        required = f"[{', '.join(self.required_scope)}]"
        for element in self.required_scope:
            if element not in scope:
                raise OAuthBearerIllegalTokenError(
                    f"The provided scope ([{', '.join(sorted(scope))}]) was missing a required "
                    f"scope ({element}).  All required scope elements: {required}",
                    failure_scope=required,
                )


def error_status(error: OAuthBearerIllegalTokenError) -> str:
    """The RFC 6750 error code the validator callback gives a refused token."""
    return "insufficient_scope" if error.failure_scope is not None else "invalid_token"


def json_error_response(error: OAuthBearerIllegalTokenError) -> str:
    """Kafka's OAuthBearerSaslServer.jsonErrorResponse (RFC 7628 §3.2.2), written as
    Kafka writes it."""
    text = f'{{"status":"{error_status(error)}"'
    if error.failure_scope is not None:
        text += f', "scope":"{error.failure_scope}"'
    return text + "}"
