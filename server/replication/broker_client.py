"""BrokerClient: one connection from this broker to another, for inter-broker requests.

Frames are built and parsed by `protocol.client_frames` (the same kio schemas the
broker serves); this module only moves them. The connection opens on first use:
resolve the target's endpoint on the inter-broker listener (it may have moved, or not
be registered yet), connect, and negotiate versions with ApiVersions, as Kafka's
NetworkClient does. To an SSL listener the connection is TLS, with the context of this
node's ssl.* settings for that listener (`ssl_factory.outgoing_context`) and the
target's host as the name to verify. To a SASL listener it then logs in with
sasl.mechanism.inter.broker.protocol, as Kafka's SaslClientAuthenticator: SaslHandshake
v1, then SaslAuthenticate requests with the mechanism's tokens for this node's JAAS
username and password — one with PLAIN's RFC 4616 token, two for SCRAM (the
client-first and client-final messages of `ScramSaslClient`, the server's final
signature checked) — or, for OAUTHBEARER, one with a fresh unsecured token made from the
JAAS `unsecuredLogin*` options (Kafka's OAuthBearerUnsecuredLoginCallbackHandler and
OAuthBearerSaslClient: an error challenge is answered with %x01, which the server
fails). When the server answers a session lifetime (KIP-368: `connections.max.reauth.ms`,
a token's expiry), the client logs in again on the same connection before its next
request once 85-95% of the lifetime has passed, as Kafka's SaslClientAuthenticator
(the random part spreads the re-authentications of many connections). Any failure
closes the connection and raises; the caller backs off and the next request reconnects.
"""

from __future__ import annotations

import asyncio
import random
import socket
import ssl
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from tiercel.config.oauthbearer_config import OAUTHBEARER
from tiercel.config.sasl_config import SaslLogin
from tiercel.protocol.client_frames import FrameError, decode_response, encode_request
from tiercel.protocol.errors import UnsupportedVersionError
from tiercel.protocol.sasl.oauthbearer_client_initial_response import CONTROL_A
from tiercel.protocol.sasl.oauthbearer_unsecured_login import (
    OAuthBearerConfigError,
    client_initial_response,
)
from tiercel.protocol.sasl.scram_formatter import ScramMechanism
from tiercel.protocol.sasl.scram_messages import ScramMessageError
from tiercel.protocol.sasl.scram_sasl_client import ScramSaslClient
from tiercel.server.network.socket_options import USE_DEFAULT_BUFFER_SIZE, set_buffer_sizes

_API_VERSIONS_KEY: Final = 18
_API_VERSIONS_VERSION: Final = 3
_SASL_HANDSHAKE_KEY: Final = 17
_SASL_AUTHENTICATE_KEY: Final = 36
_SIZE: Final = struct.Struct(">i")
# A response larger than this is a corrupt size field, not data.
_MAX_RESPONSE_BYTES: Final = 1 << 30
_REAUTH_FRACTION: Final = 0.85
_REAUTH_JITTER: Final = 0.10

Endpoint = tuple[str, int]


class BrokerUnavailableError(ConnectionError):
    """The target broker has no endpoint on the inter-broker listener right now."""


class SaslAuthenticationFailedError(ConnectionError):
    """The target broker refused this broker's SASL login."""


class BrokerClient:
    """A connection to broker ``target_id``. Event-loop only; one request at a time
    (callers await each), so responses arrive in request order.

    Invariant: ``_versions`` is the target's ApiVersions answer for the open connection,
    empty while disconnected."""

    def __init__(
        self,
        target_id: int,
        resolve_endpoint: Callable[[], Endpoint | None],
        client_id: str,
        request_timeout_s: float,
        receive_buffer_bytes: int = USE_DEFAULT_BUFFER_SIZE,
        ssl_context: ssl.SSLContext | None = None,
        sasl_login: SaslLogin | None = None,
    ) -> None:
        """`sasl_login` is this broker's login for a SASL listener, else None."""
        self.target_id = target_id
        self._ssl_context = ssl_context
        self._sasl_login = sasl_login
        self._resolve_endpoint = resolve_endpoint
        self._client_id = client_id
        self._timeout_s = request_timeout_s
        self._receive_buffer_bytes = receive_buffer_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._versions: dict[int, tuple[int, int]] = {}
        self._correlation_id = 0
        # When to re-authenticate (time.monotonic()); None: the session has no end.
        self._reauthenticate_at: float | None = None

    async def request(
        self, api_key: int, versions: tuple[int, int], body: Mapping[str, Any]
    ) -> tuple[int, Any]:
        """Send ``body`` in the highest version both sides support within ``versions``;
        returns (version used, response entity)."""
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation
            # that arrives as the awaited call fails (a refused connection), so a stopped
            # fetcher would carry on.
            if self._writer is None:
                async with asyncio.timeout(self._timeout_s):
                    await self._connect()
            elif (
                self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at
            ):
                assert self._sasl_login is not None
                async with asyncio.timeout(self._timeout_s):
                    await self._authenticate(self._sasl_login)
            version = self._pick_version(api_key, versions)
            async with asyncio.timeout(self._timeout_s):
                response = await self._round_trip(api_key, version, body)
        except BaseException:
            self.close()
            raise
        return version, response

    def _pick_version(self, api_key: int, versions: tuple[int, int]) -> int:
        theirs = self._versions.get(api_key)
        low, high = versions
        if theirs is None or max(low, theirs[0]) > min(high, theirs[1]):
            raise UnsupportedVersionError(
                f"broker {self.target_id} supports api {api_key} versions {theirs}, "
                f"this one needs {low}-{high}"
            )
        return min(high, theirs[1])

    async def _connect(self) -> None:
        endpoint = self._resolve_endpoint()
        if endpoint is None:
            raise BrokerUnavailableError(f"broker {self.target_id} has no endpoint")
        host, port = endpoint
        self._reader, self._writer = await asyncio.open_connection(
            host,
            port,
            ssl=self._ssl_context,
            server_hostname=None if self._ssl_context is None else host,
        )
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            set_buffer_sizes(sock, receive_buffer_bytes=self._receive_buffer_bytes)
        response = await self._round_trip(
            _API_VERSIONS_KEY,
            _API_VERSIONS_VERSION,
            {"client_software_name": "tiercel", "client_software_version": "1"},
        )
        if response.error_code != 0:
            raise UnsupportedVersionError(
                f"ApiVersions to broker {self.target_id} failed with {response.error_code}"
            )
        self._versions = {
            int(api.api_key): (int(api.min_version), int(api.max_version))
            for api in response.api_keys
        }
        if self._sasl_login is not None:
            await self._authenticate(self._sasl_login)

    async def _authenticate(self, login: SaslLogin) -> None:
        self._reauthenticate_at = None
        mechanism = login.mechanism
        handshake = await self._round_trip(_SASL_HANDSHAKE_KEY, 1, {"mechanism": mechanism})
        if handshake.error_code != 0:
            raise SaslAuthenticationFailedError(
                f"broker {self.target_id} refused SASL mechanism {mechanism} "
                f"({handshake.error_code}; it enables {list(handshake.mechanisms)})"
            )
        if mechanism == OAUTHBEARER:
            await self._oauthbearer_login(login)
            return
        scram = ScramMechanism.for_mechanism_name(mechanism)
        if scram is None:
            token = b"\0" + login.username.encode() + b"\0" + login.password.encode()
            await self._sasl_authenticate(login, token)
            return
        client = ScramSaslClient(scram, login.username, login.password)
        try:
            server_first = await self._sasl_authenticate(login, client.first_message())
            server_final = await self._sasl_authenticate(login, client.final_message(server_first))
            client.verify_server_final(server_final)
        except ScramMessageError as e:
            raise SaslAuthenticationFailedError(
                f"SASL/{mechanism} login to broker {self.target_id} as {login.username} failed: {e}"
            ) from None

    async def _oauthbearer_login(self, login: SaslLogin) -> None:
        """Kafka's OAuthBearerSaslClient: the initial response with a token made now; a
        non-empty challenge is the server's JSON error, answered with %x01 so the server
        ends the exchange with its failure (raised by _sasl_authenticate)."""
        try:
            token = client_initial_response(login.jaas_options, time.time_ns() // 1_000_000)
        except OAuthBearerConfigError as e:
            raise SaslAuthenticationFailedError(
                f"SASL/{login.mechanism} login to broker {self.target_id} could not make a "
                f"token: {e}"
            ) from None
        challenge = await self._sasl_authenticate(login, token)
        if challenge:
            await self._sasl_authenticate(login, CONTROL_A)
            raise SaslAuthenticationFailedError(
                f"SASL/{login.mechanism} login to broker {self.target_id} as {login.username} "
                f"failed: {challenge.decode(errors='replace')}"
            )

    async def _sasl_authenticate(self, login: SaslLogin, token: bytes) -> bytes:
        """One SaslAuthenticate round: the server's token."""
        version = self._pick_version(_SASL_AUTHENTICATE_KEY, (0, 2))
        response = await self._round_trip(_SASL_AUTHENTICATE_KEY, version, {"auth_bytes": token})
        if response.error_code != 0:
            raise SaslAuthenticationFailedError(
                f"SASL/{login.mechanism} login to broker {self.target_id} as {login.username} "
                f"failed: {response.error_message}"
            )
        lifetime = getattr(response, "session_lifetime", None)  # v1+
        if lifetime:
            # SaslClientAuthenticator: 85% of the session plus up to 10% jitter.
            fraction = _REAUTH_FRACTION + random.random() * _REAUTH_JITTER
            self._reauthenticate_at = time.monotonic() + lifetime.total_seconds() * fraction
        return bytes(response.auth_bytes)

    async def _round_trip(self, api_key: int, version: int, body: Mapping[str, Any]) -> Any:
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        correlation_id = self._correlation_id
        writer.writelines(encode_request(api_key, version, correlation_id, self._client_id, body))
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
        if not 0 < size <= _MAX_RESPONSE_BYTES:
            raise FrameError(f"response size {size} from broker {self.target_id}")
        got, response = decode_response(await reader.readexactly(size), api_key, version)
        if got != correlation_id:
            raise FrameError(
                f"broker {self.target_id} answered correlation id {got}, expected {correlation_id}"
            )
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self._versions = {}
        self._reauthenticate_at = None


class BrokerClients:
    """One `BrokerClient` per target broker, opened on first use and kept (the
    per-destination connections of Kafka's InterBrokerSendThread). Event-loop only."""

    def __init__(
        self,
        resolve_endpoint: Callable[[int], Endpoint | None],
        client_id: str,
        request_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        sasl_login: SaslLogin | None = None,
    ) -> None:
        self._resolve_endpoint = resolve_endpoint
        self._client_id = client_id
        self._timeout_s = request_timeout_s
        self._ssl_context = ssl_context
        self._sasl_login = sasl_login
        self._clients: dict[int, BrokerClient] = {}

    def get(self, broker_id: int) -> BrokerClient:
        client = self._clients.get(broker_id)
        if client is None:
            client = self._clients[broker_id] = BrokerClient(
                broker_id,
                lambda: self._resolve_endpoint(broker_id),
                self._client_id,
                self._timeout_s,
                ssl_context=self._ssl_context,
                sasl_login=self._sasl_login,
            )
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
