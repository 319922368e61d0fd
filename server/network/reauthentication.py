"""KIP-368 re-authentication on the broker: the session a SASL login opens and the frame
handler of a connection whose session has an end.

As Kafka's SaslServerAuthenticator (ReauthInfo.calcCompletionTimesAndReturnSessionLifetimeMs),
a login's session lasts `connections.max.reauth.ms` when that is set (> 0), or until the
credential expires (an OAUTHBEARER token's `exp`) when it has one, whichever is sooner,
and never when neither applies (SaslAuthenticate then answers `session_lifetime_ms` 0
and the connection goes straight to KafkaApis, paying nothing). A connection with a
session is served by `AuthenticatedSession`, which does what Kafka's SocketServer
Processor and KafkaChannel do with each request:

- a SaslHandshake begins re-authentication on the same connection
  (KafkaChannel.maybeBeginServerReauthentication), at most once a second — a second
  handshake within the second goes to KafkaApis, which answers ILLEGAL_SASL_STATE;
- any other request after the session's end closes the connection ("Disconnecting
  expired channel"), so a client that does not re-authenticate in time is cut off at its
  next request, however long it stays idle before.

A re-authentication must keep the mechanism and the principal
(ReauthInfo.saslMechanismUnchanged, ensurePrincipalUnchanged); if it fails the
connection is closed as a failed login is. Event-loop only.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.server.network.connection import Buffer, CloseConnection, Connection, FrameHandler
from tiercel.server.network.principal_builder import KafkaPrincipal

__all__ = ["AuthenticatedSession", "Reauthentication", "session_lifetime_ms"]

_log: Final = logging.getLogger("tiercel.network")
_SASL_HANDSHAKE_KEY: Final = 17
_API_KEY: Final = struct.Struct(">h")
# KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS.
_MIN_REAUTH_INTERVAL_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class Reauthentication:
    """What a re-authentication must match (Kafka's ReauthInfo): the mechanism and
    principal of the login it renews, and when it began (time.monotonic())."""

    mechanism: str
    principal: KafkaPrincipal
    begin_s: float


def session_lifetime_ms(
    credential_expiration_ms: int | None, connections_max_reauth_ms: int, now_ms: int
) -> int | None:
    """The session's lifetime, None for a session without end (Kafka's
    calcCompletionTimesAndReturnSessionLifetimeMs; a negative time left counts as 0)."""
    max_reauth_set = connections_max_reauth_ms > 0
    if credential_expiration_ms is None:
        return connections_max_reauth_ms if max_reauth_set else None
    left = max(credential_expiration_ms - now_ms, 0)
    return min(left, connections_max_reauth_ms) if max_reauth_set else left


class AuthenticatedSession:
    """The frame handler of an authenticated connection whose session ends `lifetime_ms`
    after `authenticated_s` (time.monotonic()). `reauthenticate` makes the authenticator
    of a re-authentication and makes it the connection's frame handler."""

    def __init__(
        self,
        api_handler: FrameHandler,
        mechanism: str,
        principal: KafkaPrincipal,
        authenticated_s: float,
        lifetime_ms: int,
        last_reauthentication_s: float | None,
        reauthenticate: Callable[[Connection, Reauthentication], FrameHandler],
    ) -> None:
        self._api_handler = api_handler
        self._mechanism = mechanism
        self._principal = principal
        self._expires_s = authenticated_s + lifetime_ms / 1000
        self._last_reauthentication_s = last_reauthentication_s
        self._reauthenticate = reauthenticate

    async def __call__(
        self, connection: Connection, frame: bytes | memoryview
    ) -> Sequence[Buffer] | None:
        now = time.monotonic()
        if len(frame) >= _API_KEY.size and _API_KEY.unpack_from(frame)[0] == _SASL_HANDSHAKE_KEY:
            last = self._last_reauthentication_s
            if last is None or now - last >= _MIN_REAUTH_INTERVAL_S:
                authenticator = self._reauthenticate(
                    connection, Reauthentication(self._mechanism, self._principal, now)
                )
                return await authenticator(connection, frame)
        if now > self._expires_s:
            log_event(
                _log,
                logging.INFO,
                "sasl_session_expired",
                client=connection.client_address,
                listener=connection.listener_name,
                mechanism=self._mechanism,
                principal=str(self._principal),
            )
            raise CloseConnection()
        return await self._api_handler(connection, frame)
