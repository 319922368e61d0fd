"""A TCP proxy in front of an HTTP object store that can stall chosen requests: while
``stall`` holds a pattern, a connection whose client sends a chunk matching it is
never forwarded again (as a store that stopped answering mid-upload); with
``stall_replies`` the request goes through and only the store's answers on that
connection are held (the store did the work; its client never learns it). Threads; the
test thread starts, steers and closes it.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from typing import Final

_CHUNK: Final = 65536


class StallingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.stall: re.Pattern[bytes] | None = None
        self.stall_replies = False
        self._held: set[socket.socket] = set()  # clients whose answers are held
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
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                # Refused (a paused store's accept queue is full, or it is down): the
                # client sees its connection closed, as it would going direct.
                client.close()
                continue
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, from_client: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(_CHUNK):
                stall = self.stall
                if from_client and stall is not None and stall.search(chunk):
                    self.stalled.set()
                    if not self.stall_replies:
                        return  # held: neither forwarded nor closed
                    self._held.add(source)
                if not from_client and target in self._held:
                    continue  # the store's answer, dropped
                target.sendall(chunk)
            if target not in self._held:  # else the client waits until it gives up
                target.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed = True
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()
