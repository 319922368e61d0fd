"""Free TCP ports for test servers that must know their port before they start (a KRaft
voter's address goes into every node's controller.quorum.voters; moto is given its
on the command line)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
