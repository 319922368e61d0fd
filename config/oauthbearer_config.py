"""The OAUTHBEARER options of a listener's `OAuthBearerLoginModule` JAAS entry.

As in Kafka, one login module entry carries both sides: the `unsecuredValidator*`
options configure the broker's default token validator
(`OAuthBearerUnsecuredValidatorCallbackHandler`), the `unsecuredLogin*` ones the token
this broker logs in with to another broker (`OAuthBearerUnsecuredLoginCallbackHandler`).
The validator's options are checked here, at start-up, with Kafka's messages; the login
options are checked when the token is made. Values; any thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "OAUTHBEARER",
    "OAUTHBEARER_LOGIN_MODULE",
    "OAuthBearerValidatorOptions",
    "login_principal",
]

OAUTHBEARER: Final = "OAUTHBEARER"
OAUTHBEARER_LOGIN_MODULE: Final = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
)
_VALIDATOR: Final = "unsecuredValidator"
_LOGIN: Final = "unsecuredLogin"
_LOGIN_EXTENSION: Final = f"{_LOGIN}Extension_"


@dataclass(frozen=True, slots=True)
class OAuthBearerValidatorOptions:
    """Kafka's defaults: principal claim `sub`, scope claim `scope`, no required scope,
    no clock skew. Invariant: `allowable_clock_skew_ms` >= 0."""

    principal_claim_name: str = "sub"
    scope_claim_name: str = "scope"
    required_scope: tuple[str, ...] = ()
    allowable_clock_skew_ms: int = 0

    @classmethod
    def from_jaas_options(cls, options: Mapping[str, str]) -> OAuthBearerValidatorOptions:
        """ValueError with Kafka's message for a clock skew that is not a
        non-negative int (OAuthBearerUnsecuredValidatorCallbackHandler.allowableClockSkewMs)."""
        skew_text = options.get(f"{_VALIDATOR}AllowableClockSkewMs", "").strip()
        try:
            skew = int(skew_text) if skew_text else 0
        except ValueError:
            raise ValueError(f'For input string: "{skew_text}"') from None
        if skew < 0:
            raise ValueError(f"Allowable clock skew millis must not be negative: {skew_text}")
        return cls(
            options.get(f"{_VALIDATOR}PrincipalClaimName", "").strip() or "sub",
            options.get(f"{_VALIDATOR}ScopeClaimName", "").strip() or "scope",
            # OAuthBearerScopeUtils.parseScope: space-delimited, empty elements dropped.
            tuple(options.get(f"{_VALIDATOR}RequiredScope", "").split()),
            skew,
        )


def login_principal(options: Mapping[str, str]) -> str | None:
    """The principal of the token the `unsecuredLogin*` options make (the string claim
    the login's principal claim name names), or None if they make no token, as Kafka's
    login handler makes none from options that are all absent or all extensions."""
    if not any(k.startswith(_LOGIN) and not k.startswith(_LOGIN_EXTENSION) for k in options):
        return None
    claim = options.get(f"{_LOGIN}PrincipalClaimName", "").strip() or "sub"
    return options.get(f"{_LOGIN}StringClaim_{claim}", "")
