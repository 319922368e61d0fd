"""SaslServerAuthenticator: the requests of a SASL connection before it is authenticated.

Event-loop only; one per connection of a SASL_PLAINTEXT or SASL_SSL listener (on SASL_SSL
the TLS handshake is over before the first frame). It is the connection's frame handler
until authentication succeeds, then hands the connection to KafkaApis
(`Connection.authenticated`), so authenticated requests, and every request of a PLAINTEXT
or SSL listener, pay nothing for it. The states are Kafka's `SaslServerAuthenticator`'s:

- HANDSHAKE_OR_VERSIONS_REQUEST: ApiVersions (answered by KafkaApis, as Kafka's
  `apiVersionSupplier`) or SaslHandshake;
- HANDSHAKE_REQUEST (after an ApiVersions of a served version): SaslHandshake only;
- AUTHENTICATE: after SaslHandshake v1, SaslAuthenticate requests (v0-2); after v0, the
  client's raw SASL token, answered with a size-prefixed raw token, as Kafka still does.

Any other request closes the connection (Kafka's IllegalSaslStateException), as does a
frame above `sasl.server.max.receive.size` (Kafka's `saslAuthRequestMaxReceiveSize`).
A SCRAM mechanism takes two SaslAuthenticate rounds (ScramSaslServer), PLAIN one, with
credentials from the CredentialCache (SCRAM) or the listener's JAAS users (PLAIN).
OAUTHBEARER (OAuthBearerSaslServer) takes one round for a valid token, two for a refused
one (its JSON error challenge, then the client's %x01 answered with the failure).
An unknown mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled ones, and wrong
credentials SASL_AUTHENTICATION_FAILED with the mechanism's message (for SCRAM Kafka's
generic one, which does not say whether the user exists); either answer is
sent `connection.failed.authentication.delay.ms` later and the connection closed (Kafka's
Selector delays the close of a channel that failed authentication). The wait is this
connection's alone. The log line names the client and mechanism, never a credential.

A login whose session has an end (`connections.max.reauth.ms`, an OAUTHBEARER token's
expiry; see `reauthentication`) hands the connection to an `AuthenticatedSession`
rather than straight to KafkaApis; a SaslHandshake there starts a new authenticator on
the same connection (KIP-368), which must keep the mechanism and principal.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import struct
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

from tiercel.config.logging_setup import log_event
from tiercel.config.oauthbearer_config import OAUTHBEARER
from tiercel.config.sasl_config import SaslConfig
from tiercel.protocol.entities import (
    build_entity,
    decode_request_body,
    encode_response_frame,
    request_class,
    response_class,
)
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.request_header import (
    API_VERSIONS_KEY,
    InvalidRequestHeaderError,
    parse_request_header,
    peek_api,
)
from tiercel.protocol.sasl.scram_formatter import ScramMechanism
from tiercel.server.handlers import api_versions, sasl_authenticate, sasl_handshake
from tiercel.server.network.connection import Buffer, CloseConnection, Connection, FrameHandler
from tiercel.server.network.credential_cache import CredentialCache
from tiercel.server.network.oauthbearer_sasl_server import OAuthBearerSaslServer
from tiercel.server.network.oauthbearer_validator import OAuthBearerUnsecuredValidator
from tiercel.server.network.plain_sasl_server import PlainSaslServer, SaslAuthenticationError
from tiercel.server.network.principal_builder import KafkaPrincipal
from tiercel.server.network.reauthentication import (
    AuthenticatedSession,
    Reauthentication,
    session_lifetime_ms,
)
from tiercel.server.network.scram_sasl_server import SaslError, ScramSaslServer

__all__ = ["SaslServerAuthenticator"]

_log: Final = logging.getLogger("tiercel.network")
_EMPTY_TOKEN: Final = struct.pack(">i", 0)


class _SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS_REQUEST = enum.auto()
    HANDSHAKE_REQUEST = enum.auto()
    AUTHENTICATE = enum.auto()


class SaslServerAuthenticator:
    """The frame handler of one SASL connection until it authenticates; `api_handler`
    (KafkaApis.handle_frame) answers ApiVersions and every request after."""

    def __init__(
        self,
        config: SaslConfig,
        api_handler: FrameHandler,
        max_request_size: int,
        failed_authentication_delay_ms: int,
        credential_cache: CredentialCache,
        sasl_max_receive_size: int,
        reauthentication: Reauthentication | None = None,
    ) -> None:
        """`reauthentication` is set for a re-authentication (KIP-368), which begins with
        SaslHandshake."""
        self._config = config
        self._sasl_max_receive_size = sasl_max_receive_size
        self._reauthentication = reauthentication
        # Kafka's ReauthInfo.badMechanismErrorMessage.
        self._bad_mechanism_message: str | None = None
        self._credential_cache = credential_cache
        self._server: ScramSaslServer | OAuthBearerSaslServer | None = None
        self._api_handler = api_handler
        self._max_request_size = max_request_size
        self._delay_s = failed_authentication_delay_ms / 1000
        self._state = (
            _SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
            if reauthentication is None
            else _SaslState.HANDSHAKE_REQUEST
        )
        self._mechanism = ""
        self._raw_tokens = False

    async def __call__(
        self, connection: Connection, frame: bytes | memoryview
    ) -> Sequence[Buffer] | None:
        if self._state is _SaslState.AUTHENTICATE:
            if self._raw_tokens:
                return await self._authenticate_raw(connection, frame)
            return await self._authenticate(connection, frame)
        try:
            api_key, api_version, correlation_id = peek_api(frame)
        except InvalidRequestHeaderError as e:
            # Kafka would take this for a GSSAPI token of a 0.9 client; GSSAPI is not served.
            _close(connection, "sasl_invalid_request", reason=str(e))
        if api_key == API_VERSIONS_KEY and self._state is _SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
            response = await self._api_handler(connection, frame)
            # An unsupported version is answered (KIP-511) and may be retried.
            if api_versions.MIN_VERSION <= api_version <= api_versions.MAX_VERSION:
                self._state = _SaslState.HANDSHAKE_REQUEST
            return response
        if api_key != sasl_handshake.API_KEY:
            _close(connection, "sasl_unexpected_request", api_key=api_key, state=self._state.name)
        request = _decode(connection, frame, api_key, api_version, sasl_handshake.MAX_VERSION)
        return await self._handshake(connection, request.mechanism, api_version, correlation_id)

    async def _handshake(
        self, connection: Connection, mechanism: str, version: int, correlation_id: int
    ) -> Sequence[Buffer]:
        """Kafka's handleHandshakeRequest."""
        enabled = list(self._config.enabled_mechanisms)
        if mechanism not in enabled:
            response = _encode(
                sasl_handshake.API_KEY,
                version,
                correlation_id,
                {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled},
            )
            await self._fail(connection, mechanism, f"Unsupported SASL mechanism {mechanism}")
            raise CloseConnection(response)
        self._mechanism = mechanism
        previous = self._reauthentication
        if previous is not None and previous.mechanism != mechanism:
            # Kafka answers the handshake and fails the token that follows.
            self._bad_mechanism_message = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{previous.mechanism}'"
            )
        scram = ScramMechanism.for_mechanism_name(mechanism)
        if scram is not None:
            self._server = ScramSaslServer(scram, self._credential_cache)
        elif mechanism == OAUTHBEARER:
            validator = OAuthBearerUnsecuredValidator(self._config.oauthbearer)
            self._server = OAuthBearerSaslServer(validator, _wall_clock_ms)
        self._raw_tokens = version == 0
        self._state = _SaslState.AUTHENTICATE
        return _encode(
            sasl_handshake.API_KEY,
            version,
            correlation_id,
            {"error_code": ErrorCode.none, "mechanisms": enabled},
        )

    async def _authenticate(
        self, connection: Connection, frame: bytes | memoryview
    ) -> Sequence[Buffer]:
        """Kafka's handleSaslToken with SaslAuthenticate headers (after SaslHandshake v1)."""
        try:
            api_key, api_version, correlation_id = peek_api(frame)
        except InvalidRequestHeaderError as e:
            _close(connection, "sasl_invalid_request", reason=str(e))
        if api_key != sasl_authenticate.API_KEY:
            _close(connection, "sasl_unexpected_request", api_key=api_key, state=self._state.name)
        request = _decode(connection, frame, api_key, api_version, sasl_authenticate.MAX_VERSION)
        try:
            challenge, user = self._evaluate(request.auth_bytes)
            lifetime_ms = 0 if user is None else self._complete(connection, user)
        except SaslAuthenticationError as e:
            response = _encode(
                api_key,
                api_version,
                correlation_id,
                {"error_code": ErrorCode.sasl_authentication_failed, "error_message": str(e)},
            )
            await self._fail(connection, self._mechanism, str(e.__cause__ or e))
            raise CloseConnection(response) from None
        return _encode(
            api_key,
            api_version,
            correlation_id,
            {
                "error_code": ErrorCode.none,
                "auth_bytes": challenge,
                "session_lifetime": lifetime_ms,
            },
        )

    async def _authenticate_raw(
        self, connection: Connection, frame: bytes | memoryview
    ) -> Sequence[Buffer]:
        """After SaslHandshake v0 the frame is the bare SASL token, and a failure closes
        the connection with no answer (there is no error field to carry it)."""
        try:
            challenge, user = self._evaluate(frame)
            if user is not None:
                self._complete(connection, user)
        except SaslAuthenticationError as e:
            await self._fail(connection, self._mechanism, str(e.__cause__ or e))
            raise CloseConnection() from None
        return [struct.pack(">i", len(challenge)), challenge] if challenge else [_EMPTY_TOKEN]

    def _evaluate(self, token: bytes | memoryview) -> tuple[bytes, str | None]:
        """The challenge for the client and, once the exchange is complete, the user.
        SaslAuthenticationError carries the message the client gets; a SaslError's reason
        is its cause, for the log only, and the client gets Kafka's generic message
        (SaslServerAuthenticator.handleSaslToken)."""
        if self._bad_mechanism_message is not None:
            raise SaslAuthenticationError(self._bad_mechanism_message)
        if self._server is None:
            return b"", PlainSaslServer(self._config.plain_users).evaluate_response(token)
        try:
            challenge = self._server.evaluate_response(token)
        except SaslError as e:
            raise SaslAuthenticationError(
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self._mechanism}"
            ) from e
        return challenge, self._server.authorization_id

    def _complete(self, connection: Connection, user: str) -> int:
        """Hand the connection on; the session lifetime for SaslAuthenticate (0: none).
        SaslAuthenticationError if a re-authentication changed the principal."""
        principal = KafkaPrincipal("User", user)
        previous = self._reauthentication
        if previous is not None and previous.principal != principal:
            # Kafka's ReauthInfo.ensurePrincipalUnchanged, with its message.
            raise SaslAuthenticationError(
                "Cannot change principals during re-authentication from "
                f"{previous.principal.principal_type}.{previous.principal.name}: "
                f"{principal.principal_type}.{principal.name}"
            )
        token = self._server.token if isinstance(self._server, OAuthBearerSaslServer) else None
        lifetime_ms = session_lifetime_ms(
            None if token is None else token.lifetime_ms,
            self._config.connections_max_reauth_ms,
            _wall_clock_ms(),
        )
        log_event(
            _log,
            logging.DEBUG,
            "sasl_authenticated" if previous is None else "sasl_reauthenticated",
            client=connection.client_address,
            mechanism=self._mechanism,
            user=user,
            session_lifetime_ms=lifetime_ms,
        )
        handler: FrameHandler = self._api_handler
        if lifetime_ms is not None:
            handler = AuthenticatedSession(
                self._api_handler,
                self._mechanism,
                principal,
                time.monotonic(),
                lifetime_ms,
                None if previous is None else previous.begin_s,
                self._reauthenticator,
            )
        connection.authenticated(principal, handler, self._max_request_size)
        return lifetime_ms or 0

    def _reauthenticator(
        self, connection: Connection, reauthentication: Reauthentication
    ) -> FrameHandler:
        """A new authenticator for a re-authentication, now the connection's handler."""
        authenticator = SaslServerAuthenticator(
            self._config,
            self._api_handler,
            self._max_request_size,
            round(self._delay_s * 1000),
            self._credential_cache,
            self._sasl_max_receive_size,
            reauthentication,
        )
        connection.reauthenticating(authenticator, self._sasl_max_receive_size)
        return authenticator

    async def _fail(self, connection: Connection, mechanism: str, reason: str) -> None:
        """Log the failure, then wait out the failed-authentication delay."""
        log_event(
            _log,
            logging.WARNING,
            "sasl_authentication_failed",
            client=connection.client_address,
            listener=connection.listener_name,
            mechanism=mechanism,
            reason=reason,
        )
        if self._delay_s > 0:
            await asyncio.sleep(self._delay_s)


def _wall_clock_ms() -> int:
    """Kafka's Time.SYSTEM.milliseconds: token times are wall-clock seconds."""
    return time.time_ns() // 1_000_000


def _decode(
    connection: Connection, frame: bytes | memoryview, api_key: int, version: int, max_version: int
) -> Any:
    """The request body; a version Kafka does not serve or a malformed body closes the
    connection (Kafka cannot answer an unsupported SaslAuthenticate version either)."""
    if not 0 <= version <= max_version:
        _close(connection, "unsupported_api_version", api_key=api_key, api_version=version)
    request_type = request_class(api_key, version)
    try:
        header = parse_request_header(frame, request_type.__flexible__)
        return decode_request_body(request_type, frame, header.size)
    except Exception as e:  # kio's native reader has several exception types
        _close(connection, "invalid_request", api_key=api_key, reason=f"{type(e).__name__}: {e}")


def _encode(
    api_key: int, version: int, correlation_id: int, response: Mapping[str, Any]
) -> list[Buffer]:
    entity = build_entity(response_class(api_key, version), response, fill_missing=True)
    return encode_response_frame(correlation_id, entity)


def _close(connection: Connection, event: str, **fields: object) -> NoReturn:
    log_event(_log, logging.WARNING, event, client=connection.client_address, **fields)
    raise CloseConnection()
