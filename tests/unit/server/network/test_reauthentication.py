"""KIP-368 session lifetimes as Kafka's
SaslServerAuthenticator.ReauthInfo.calcCompletionTimesAndReturnSessionLifetimeMs."""

from __future__ import annotations

import pytest

from tiercel.server.network.reauthentication import session_lifetime_ms


@pytest.mark.parametrize(
    ("credential_expiration_ms", "max_reauth_ms", "expected"),
    [
        (None, 0, None),  # neither: the session has no end
        (None, 5000, 5000),  # connections.max.reauth.ms alone
        (1_060_000, 0, 60_000),  # a token alone: its time left, even with reauth off
        (1_060_000, 5000, 5000),  # both: the sooner
        (1_002_000, 5000, 2000),
        (999_000, 5000, 0),  # a token already expired: 0, never negative
        (999_000, 0, 0),
    ],
)
def test_session_lifetime(
    credential_expiration_ms: int | None, max_reauth_ms: int, expected: int | None
) -> None:
    assert session_lifetime_ms(credential_expiration_ms, max_reauth_ms, 1_000_000) == expected
