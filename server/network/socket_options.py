"""Socket buffer sizes of the broker's connections, set as Kafka sets them.

Kafka's `SocketServer.Acceptor` sets SO_RCVBUF (socket.receive.buffer.bytes) on the
listening socket, so that accepted connections inherit it and the window scale offered
in the handshake fits it, and SO_SNDBUF (socket.send.buffer.bytes) on each accepted
socket. The replica fetcher's connections get replica.socket.receive.buffer.bytes as
SO_RCVBUF (Kafka's `BrokerBlockingSender`). -1 (`Selectable.USE_DEFAULT_BUFFER_SIZE`)
keeps the operating system's default. Linux reports back twice the size set (its
bookkeeping overhead) and caps it at net.core.wmem_max / rmem_max.
"""

from __future__ import annotations

import socket
from typing import Final, Protocol

__all__ = ["USE_DEFAULT_BUFFER_SIZE", "SocketLike", "set_buffer_sizes"]

USE_DEFAULT_BUFFER_SIZE: Final = -1


class SocketLike(Protocol):
    """A socket or a transport's view of one (uvloop's pseudo-socket, asyncio's
    TransportSocket)."""

    def setsockopt(self, level: int, optname: int, value: int, /) -> None: ...


def set_buffer_sizes(
    sock: SocketLike,
    send_buffer_bytes: int = USE_DEFAULT_BUFFER_SIZE,
    receive_buffer_bytes: int = USE_DEFAULT_BUFFER_SIZE,
) -> None:
    """Set SO_SNDBUF and SO_RCVBUF of `sock`, leaving either at the OS default for -1."""
    if send_buffer_bytes != USE_DEFAULT_BUFFER_SIZE:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
    if receive_buffer_bytes != USE_DEFAULT_BUFFER_SIZE:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
