"""A TCP proxy in front of an HTTP object store that can stall chosen requests: while
``stall`` holds a byte string, a connection whose client sends a chunk containing it is
never forwarded again (as a store that stopped answering mid-upload). Threads; the test
thread starts, steers and closes it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Final

_CHUNK: Final = 65536


class StallingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.stall: bytes | None = None
        self.stalled = threading.Event()  # set once a request was held
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, from_client: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(_CHUNK):
                stall = self.stall
                if from_client and stall is not None and stall in chunk:
                    self.stalled.set()
                    return  # held: neither forwarded nor closed
                target.sendall(chunk)
            target.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed = True
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()
