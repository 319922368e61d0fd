"""Network definitions: Kafka's `SocketServerConfigs` (listeners, socket options, request
queueing, idle connections).

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import (
    ConfigDef,
    ConfigType,
    at_least,
    non_empty_distinct,
)

_I = ConfigType.INT
_L = ConfigType.LONG
_LIST = ConfigType.LIST

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
SOCKET_SERVER_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("listeners", _LIST, ("PLAINTEXT://127.0.0.1:9092",), non_empty_distinct(),
              "Comma-separated addresses to listen on as NAME://host:port; "
              "an empty host means all interfaces."),
    ConfigDef("advertised.listeners", _LIST, None, None,
              "Addresses handed to clients in metadata; when unset, listeners is used."),
    ConfigDef("listener.security.protocol.map", _LIST,
              ("PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT",
               "SASL_SSL:SASL_SSL"), None,
              "Listener name to security protocol, as NAME:PROTOCOL pairs: PLAINTEXT, SSL, "
              "SASL_PLAINTEXT or SASL_SSL."),
    ConfigDef("socket.send.buffer.bytes", _I, 102400, at_least(-1),
              "SO_SNDBUF of accepted sockets; -1 keeps the operating system default."),
    ConfigDef("socket.receive.buffer.bytes", _I, 102400, at_least(-1),
              "SO_RCVBUF of accepted sockets; -1 keeps the operating system default."),
    ConfigDef("socket.request.max.bytes", _I, 104857600, at_least(1),
              "Largest request the broker accepts; a bigger frame closes the connection."),
    ConfigDef("queued.max.requests", _I, 500, at_least(1),
              "Requests a connection may have in flight before the broker stops reading it."),
    ConfigDef("connections.max.idle.ms", _L, 600000, None,
              "Idle connections are closed after this many milliseconds."),
)
# fmt: on
