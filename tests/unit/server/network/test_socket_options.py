"""Socket buffer sizes as Kafka's Acceptor sets them; -1 keeps the OS default."""

from __future__ import annotations

import socket

from tiercel.server.network.socket_options import USE_DEFAULT_BUFFER_SIZE, set_buffer_sizes


def _buffers(sock: socket.socket) -> tuple[int, int]:
    return (
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
    )


def test_sizes_are_set_and_read_back() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        set_buffer_sizes(sock, send_buffer_bytes=40960, receive_buffer_bytes=20480)
        # Linux reports twice the size set (its bookkeeping overhead).
        assert _buffers(sock) == (2 * 40960, 2 * 20480)


def test_minus_one_keeps_the_os_default() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as configured,
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as untouched,
    ):
        set_buffer_sizes(configured, USE_DEFAULT_BUFFER_SIZE, USE_DEFAULT_BUFFER_SIZE)
        assert _buffers(configured) == _buffers(untouched)


def test_each_direction_is_independent() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as untouched,
    ):
        set_buffer_sizes(sock, send_buffer_bytes=40960)
        assert _buffers(sock) == (2 * 40960, _buffers(untouched)[1])
