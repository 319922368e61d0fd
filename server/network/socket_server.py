"""Listeners and the set of live connections.

Event-loop only. One asyncio server per listener; every accepted socket becomes a
`Connection` handing complete frames to the request handler. An SSL listener serves
with the ssl.SSLContext built once, when the server is made (`ssl_factory`); its TLS
handshake must finish within ``connections.max.idle.ms``, the bound Kafka's selector
puts on any channel that makes no progress, so a client that never completes it is
closed. Idle connections are closed after ``connections.max.idle.ms`` like Kafka's
selector does, which also bounds what half-open clients can hold. Socket buffer sizes
are set as Kafka's Acceptor sets them (see `socket_options`). A SASL listener's
connections start with a `SaslServerAuthenticator` of their own as frame handler (Kafka's
SaslChannelBuilder builds one per channel), which lets only the authentication exchange
through and bounds its frames by ``sasl.server.max.receive.size``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Mapping
from typing import Final

from tiercel.config.broker_config import Listener
from tiercel.config.logging_setup import log_event
from tiercel.config.sasl_config import SaslConfig
from tiercel.config.ssl_config import SslConfig
from tiercel.config.ssl_factory import server_context
from tiercel.server.network.connection import Connection, FrameHandler
from tiercel.server.network.sasl_server_authenticator import SaslServerAuthenticator
from tiercel.server.network.socket_options import USE_DEFAULT_BUFFER_SIZE, set_buffer_sizes
from tiercel.server.network.ssl_principal_mapper import SslPrincipalMapper

_log: Final = logging.getLogger("tiercel.network")
SHUTDOWN_DRAIN_S: Final = 10.0


class SocketServer:
    def __init__(
        self,
        listeners: list[Listener],
        handler: FrameHandler,
        max_request_size: int,
        max_queued_requests: int,
        connections_max_idle_ms: int,
        send_buffer_bytes: int = USE_DEFAULT_BUFFER_SIZE,
        receive_buffer_bytes: int = USE_DEFAULT_BUFFER_SIZE,
        ssl_configs: Mapping[str, SslConfig] | None = None,
        sasl_configs: Mapping[str, SaslConfig] | None = None,
        sasl_max_receive_size: int = 524288,
        failed_authentication_delay_ms: int = 100,
    ) -> None:
        """`ssl_configs` holds the SslConfig of each SSL or SASL_SSL listener by name (it
        may hold others' too), `sasl_configs` the SaslConfig of each SASL listener;
        ConfigError if a store cannot be read."""
        self._listeners = listeners
        self._tls: dict[str, tuple[ssl.SSLContext, SslPrincipalMapper]] = {
            name: (server_context(config), SslPrincipalMapper(config.principal_mapping_rules))
            for name, config in (ssl_configs or {}).items()
            if name in {e.name for e in listeners}
        }
        self._sasl = dict(sasl_configs or {})
        self._sasl_max_receive_size = sasl_max_receive_size
        self._failed_authentication_delay_ms = failed_authentication_delay_ms
        self._handler = handler
        self._max_request_size = max_request_size
        self._max_queued = max_queued_requests
        self._max_idle_s = connections_max_idle_ms / 1000
        self._send_buffer_bytes = send_buffer_bytes
        self._receive_buffer_bytes = receive_buffer_bytes
        self._servers: list[asyncio.Server] = []
        self.connections: set[Connection] = set()
        self._reaper: asyncio.Task[None] | None = None
        self.bound_ports: dict[str, int] = {}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for listener in self._listeners:
            context, mapper = self._tls.get(listener.name, (None, None))
            if listener.name in self._sasl:
                mapper = None  # the principal comes from SASL, not the certificate
            server = await loop.create_server(
                lambda name=listener.name, mapper=mapper: self._new_connection(name, mapper),
                host=listener.host or None,
                port=listener.port,
                reuse_address=True,
                backlog=1024,
                ssl=context,
                ssl_handshake_timeout=self._handshake_timeout_s(context),
            )
            for sock in server.sockets:
                set_buffer_sizes(sock, receive_buffer_bytes=self._receive_buffer_bytes)
            port = server.sockets[0].getsockname()[1]
            self.bound_ports[listener.name] = port
            self._servers.append(server)
            log_event(
                _log,
                logging.INFO,
                "listening",
                listener=listener.name,
                host=listener.host or "0.0.0.0",
                port=port,
            )
        self._reaper = loop.create_task(self._reap_idle(), name="idle-connection-reaper")

    def _handshake_timeout_s(self, context: ssl.SSLContext | None) -> float | None:
        """connections.max.idle.ms for a TLS listener; asyncio's default (60 s) when idle
        connections are never closed (a negative value), so a handshake stays bounded."""
        if context is None or self._max_idle_s <= 0:
            return None
        return self._max_idle_s

    def _new_connection(
        self, listener_name: str, principal_mapper: SslPrincipalMapper | None
    ) -> Connection:
        handler, max_request_size = self._handler, self._max_request_size
        sasl = self._sasl.get(listener_name)
        if sasl is not None:
            handler = SaslServerAuthenticator(
                sasl, handler, max_request_size, self._failed_authentication_delay_ms
            )
            max_request_size = min(max_request_size, self._sasl_max_receive_size)
        return Connection(
            handler,
            listener_name,
            max_request_size,
            self._max_queued,
            self.connections.add,
            self.connections.discard,
            self._send_buffer_bytes,
            principal_mapper,
        )

    async def _reap_idle(self) -> None:
        interval = max(min(self._max_idle_s / 4, 30.0), 0.05)
        while True:
            await asyncio.sleep(interval)
            deadline = time.monotonic() - self._max_idle_s
            for connection in list(self.connections):
                if connection.idle and connection.last_active < deadline:
                    log_event(
                        _log,
                        logging.INFO,
                        "idle_connection_closed",
                        client=connection.client_address,
                    )
                    connection.close()

    async def shutdown(self) -> None:
        """Stop accepting, answer requests already received, close every connection.

        A client that stopped reading cannot hold the broker up: after
        ``SHUTDOWN_DRAIN_S`` the remaining connections are aborted."""
        for server in self._servers:
            server.close()
        if self._reaper is not None:
            self._reaper.cancel()
        drains = [asyncio.ensure_future(c.shutdown()) for c in list(self.connections)]
        if not drains:
            return
        _, pending = await asyncio.wait(drains, timeout=SHUTDOWN_DRAIN_S)
        for task in pending:
            task.cancel()
        for connection in list(self.connections):
            log_event(
                _log,
                logging.WARNING,
                "connection_aborted_at_shutdown",
                client=connection.client_address,
            )
            connection.abort()
