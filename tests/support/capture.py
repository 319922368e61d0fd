"""A recording TCP proxy: every request frame a client sends to a broker, as sent.

    client ──► CaptureProxy (listen_port) ──► broker (upstream)
           ◄──                            ◄──

Bytes are forwarded unchanged both ways. The client-to-broker stream of each connection
is also cut into frames (int32 size prefix, then that many bytes); each whole frame is
kept, without its size prefix, with the (api_key, api_version) read from its header.
Point the broker's ``advertised.listeners`` at the proxy so that a client's later
connections (to the broker it learns from Metadata) come through the proxy too.

`CaptureProxy` runs its own threads: ``start``/``stop``/``frames`` may be called from
any thread; one accept thread and two pump threads per connection do the work.
`save_frames` writes ``<api_name>_v<version>_<n>.bin`` files and is a plain function.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kio.schema.index import api_key_map

_HEADER_PREFIX: Final = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_CORRELATION_ID: Final = slice(4, 8)  # within a frame without its size prefix


@dataclass(frozen=True, slots=True)
class CapturedFrame:
    """One request frame (size prefix removed), in the order the client sent it."""

    connection: int
    api_key: int
    api_version: int
    frame: bytes

    @property
    def api_name(self) -> str:
        return api_key_map[self.api_key]

    def without_correlation_id(self) -> bytes:
        return self.frame[:4] + b"\x00\x00\x00\x00" + self.frame[8:]


class CaptureProxy:
    """The proxy. Any thread may call its methods; its own threads do the forwarding.

    Invariant: `frames` lists whole request frames only, in the order each connection
    sent them; bytes reach the broker unchanged whether or not they form a frame.
    """

    def __init__(self, upstream_host: str = "127.0.0.1", upstream_port: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._frames: list[CapturedFrame] = []
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._connections = 0
        self._stopped = threading.Event()

    def start(self) -> CaptureProxy:
        self._spawn(self._accept_loop)
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._server.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            sock.close()
        for thread in self._threads:
            thread.join(5)

    def frames(self) -> list[CapturedFrame]:
        with self._lock:
            return list(self._frames)

    def clear(self) -> None:
        with self._lock:
            self._frames.clear()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                client.close()  # the broker is gone: the client sees a refused connection
                continue
            with self._lock:
                self._connections += 1
                connection = self._connections
                self._sockets += [client, upstream]
            self._spawn(self._pump, client, upstream, connection)
            self._spawn(self._pump, upstream, client, None)

    def _pump(self, source: socket.socket, sink: socket.socket, record_as: int | None) -> None:
        buffer = bytearray()
        with contextlib.suppress(OSError):  # a reset, or stop() closed the sockets
            while data := source.recv(65536):
                sink.sendall(data)
                if record_as is not None:
                    buffer += data
                    self._record(buffer, record_as)
        with contextlib.suppress(OSError):  # pass the EOF on; the sink may be closed
            sink.shutdown(socket.SHUT_WR)

    def _record(self, buffer: bytearray, connection: int) -> None:
        while len(buffer) >= _HEADER_PREFIX.size:
            size, api_key, api_version, _ = _HEADER_PREFIX.unpack_from(buffer)
            if len(buffer) < 4 + size:
                return
            frame = bytes(buffer[4 : 4 + size])
            del buffer[: 4 + size]
            with self._lock:
                self._frames.append(CapturedFrame(connection, api_key, api_version, frame))


def select_frames(
    frames: Iterable[CapturedFrame], max_per_version: int, keep_all: frozenset[int]
) -> list[CapturedFrame]:
    """Drop frames identical but for the correlation id, then keep the first
    ``max_per_version`` of each (api_key, api_version); APIs in ``keep_all`` keep every
    distinct frame (Produce: one per codec)."""
    seen: set[bytes] = set()
    counts: dict[tuple[int, int], int] = {}
    kept = []
    for frame in frames:
        identity = frame.without_correlation_id()
        key = (frame.api_key, frame.api_version)
        if identity in seen:
            continue
        if frame.api_key not in keep_all and counts.get(key, 0) >= max_per_version:
            continue
        seen.add(identity)
        counts[key] = counts.get(key, 0) + 1
        kept.append(frame)
    return kept


def save_frames(frames: Iterable[CapturedFrame], out_dir: Path) -> list[Path]:
    """Write each frame as ``<api_name>_v<version>_<n>.bin`` (n counts from 0 per
    api and version, in capture order); returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[tuple[int, int], int] = {}
    paths = []
    for frame in frames:
        key = (frame.api_key, frame.api_version)
        n = counts.get(key, 0)
        counts[key] = n + 1
        path = out_dir / f"{frame.api_name}_v{frame.api_version}_{n}.bin"
        path.write_bytes(frame.frame)
        paths.append(path)
    return paths
