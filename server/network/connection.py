"""One client connection: framing, in-order request processing, backpressure.

Event-loop only. Bytes arrive through ``get_buffer``/``buffer_updated`` (a buffered
protocol: small frames are cut out of a 64 KiB receive buffer, a large frame is received
straight into buffers of its own that grow as it arrives, so produce data is copied at
most once on the way in and a size prefix alone commits no memory).
Complete size-prefixed frames are queued and handled one at a time, in arrival order, by
the connection's processor task, so responses leave in request order (clients pipeline
requests and match responses by order as well as correlation id). Like Kafka's muted
channels this also keeps the requests of one client strictly ordered through the log.

On an SSL listener the transport is asyncio's TLS transport: `connection_made` comes once
the handshake is over, and the connection's `principal` is then built from the client's
certificate (Kafka's DefaultKafkaPrincipalBuilder, see `principal_builder`); a PLAINTEXT
connection is `User:ANONYMOUS` and costs nothing more. On a SASL listener the first
handler is the connection's `SaslServerAuthenticator`, which hands the connection to
KafkaApis, with the SASL principal, once the client has authenticated (`authenticated`).

Two bounds protect the broker from one client: a frame whose size prefix is negative or
above ``socket.request.max.bytes`` closes the connection before anything is allocated
for it, and once ``queued.max.requests`` frames are waiting, or the transport's write
buffer is over its high-water mark, the connection stops being read until they drain.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, cast

from tiercel.config.logging_setup import log_event
from tiercel.server.network.principal_builder import ANONYMOUS, KafkaPrincipal, ssl_principal
from tiercel.server.network.socket_options import USE_DEFAULT_BUFFER_SIZE, set_buffer_sizes
from tiercel.server.network.ssl_principal_mapper import NoMatchingRuleError, SslPrincipalMapper

Buffer = bytes | bytearray | memoryview
FrameHandler = Callable[["Connection", bytes | memoryview], Awaitable[Sequence[Buffer] | None]]

_log: Final = logging.getLogger("tiercel.network")
# Small frames are parsed out of this receive buffer; larger ones get a buffer of their own.
_RECV_BUFFER_SIZE: Final = 64 * 1024
_FIRST_CHUNK: Final = 256 * 1024


class CloseConnection(Exception):
    """Raised by the request handler when the connection must be closed: at once, or
    once `response` (a last answer, such as a failed authentication's) is sent."""

    def __init__(self, response: Sequence[Buffer] | None = None) -> None:
        super().__init__()
        self.response = response


class _LargeFrame:
    """A frame too big for the receive buffer, received in place: into buffers that grow
    (doubling, from 256 KiB) as its bytes arrive, so a client that only sends a large
    size prefix commits no memory for the rest."""

    __slots__ = ("_chunks", "_last_filled", "filled", "size")

    def __init__(self, size: int, first: bytes | bytearray) -> None:
        self.size = size
        self._chunks: list[bytearray] = []
        self._last_filled = 0
        self.filled = 0
        self._add_chunk(max(len(first), _FIRST_CHUNK))
        self._chunks[0][: len(first)] = first
        self.received(len(first))

    def _add_chunk(self, wanted: int) -> None:
        self._chunks.append(bytearray(min(wanted, self.size - self.filled)))
        self._last_filled = 0

    def free_space(self) -> memoryview:
        last = self._chunks[-1]
        if self._last_filled == len(last):
            self._add_chunk(2 * len(last))
            last = self._chunks[-1]
        return memoryview(last)[self._last_filled :]

    def received(self, nbytes: int) -> bool:
        """Account for bytes written into `free_space`; True once the frame is whole."""
        self._last_filled += nbytes
        self.filled += nbytes
        return self.filled == self.size

    def frame(self) -> memoryview | bytes:
        if len(self._chunks) == 1:
            # kio's readers take read-only buffers; a read-only view costs no copy.
            return memoryview(self._chunks[0]).toreadonly()
        return b"".join(self._chunks)


class Connection(asyncio.BufferedProtocol):
    """`on_opened` is called when the connection is established (after the TLS handshake
    on an SSL listener: a client whose handshake fails never opens one), `on_closed` when
    it is lost; `principal_mapper` is an SSL listener's, None on any other (on SASL_SSL
    the principal comes from SASL)."""

    def __init__(
        self,
        handler: FrameHandler,
        listener_name: str,
        max_request_size: int,
        max_queued_requests: int,
        on_opened: Callable[[Connection], None],
        on_closed: Callable[[Connection], None],
        send_buffer_bytes: int = USE_DEFAULT_BUFFER_SIZE,
        principal_mapper: SslPrincipalMapper | None = None,
    ) -> None:
        self._handler = handler
        self.listener_name = listener_name
        self._on_opened = on_opened
        self._principal_mapper = principal_mapper
        self.principal: KafkaPrincipal = ANONYMOUS
        self._max_request_size = max_request_size
        self._max_queued = max_queued_requests
        self._on_closed = on_closed
        self._send_buffer_bytes = send_buffer_bytes
        self._recv = bytearray(_RECV_BUFFER_SIZE)
        self._recv_len = 0
        self._large: _LargeFrame | None = None
        self._frames: collections.deque[bytes | memoryview] = collections.deque()
        self._frame_ready = asyncio.Event()
        self._write_ready = asyncio.Event()
        self._write_ready.set()
        self._transport: asyncio.Transport | None = None
        self._processor: asyncio.Task[None] | None = None
        self._reading_paused = False
        self._closing = False
        self._draining = False
        self.client_address = "?"
        self.last_active = time.monotonic()

    # asyncio.Protocol callbacks -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            set_buffer_sizes(sock, send_buffer_bytes=self._send_buffer_bytes)
        peer = transport.get_extra_info("peername")
        if peer:
            self.client_address = f"{peer[0]}:{peer[1]}"
        self._on_opened(self)
        if self._principal_mapper is not None:
            try:
                self.principal = ssl_principal(
                    transport.get_extra_info("ssl_object"), self._principal_mapper
                )
            except NoMatchingRuleError as e:
                # Kafka fails the authentication and closes the channel.
                log_event(
                    _log,
                    logging.WARNING,
                    "ssl_principal_refused",
                    client=self.client_address,
                    reason=str(e),
                )
                self.close()
                return
        self._processor = asyncio.get_running_loop().create_task(
            self._process(), name=f"connection {self.client_address}"
        )

    def get_buffer(self, sizehint: int) -> memoryview:
        large = self._large
        if large is not None:
            return large.free_space()
        return memoryview(self._recv)[self._recv_len :]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        large = self._large
        if large is not None:
            if large.received(nbytes):
                self._queue(large.frame())
                self._large = None
            return
        self._recv_len += nbytes
        self._parse_frames()

    def _parse_frames(self) -> None:
        recv = self._recv
        pos = 0
        end = self._recv_len
        while end - pos >= 4:
            size = int.from_bytes(recv[pos : pos + 4], "big", signed=True)
            if size < 0 or size > self._max_request_size:
                log_event(
                    _log,
                    logging.WARNING,
                    "invalid_request_size",
                    client=self.client_address,
                    size=size,
                    max=self._max_request_size,
                )
                self.close()
                return
            start = pos + 4
            if end - start >= size:
                self._queue(bytes(recv[start : start + size]))
                pos = start + size
            elif size > _RECV_BUFFER_SIZE - 4:
                self._large = _LargeFrame(size, recv[start:end])
                pos = end
            else:
                break
        # Keep the partial frame (if any) at the front of the buffer.
        remaining = end - pos
        if pos and remaining:
            recv[:remaining] = recv[pos:end]
        self._recv_len = remaining

    def _queue(self, frame: bytes | memoryview) -> None:
        self._frames.append(frame)
        self._frame_ready.set()
        if len(self._frames) >= self._max_queued:
            self._pause_reading()

    def eof_received(self) -> bool | None:
        # Half-closed by the client: answer what was already received, then close.
        partial = self._recv_len + (self._large.filled if self._large is not None else 0)
        if partial:
            log_event(
                _log,
                logging.WARNING,
                "truncated_request_frame",
                client=self.client_address,
                bytes=partial,
            )
        self._draining = True
        self._frame_ready.set()
        # TLS has no half-close: the TLS transport closes on the client's close_notify
        # whatever this returns (and warns if it is true).
        return self._transport is None or self._transport.get_extra_info("ssl_object") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._frame_ready.set()
        self._write_ready.set()
        if self._processor is not None and not self._processor.done():
            self._processor.cancel()
        self._on_closed(self)

    def pause_writing(self) -> None:
        self._write_ready.clear()
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_ready.set()

    # processing -----------------------------------------------------------------------

    async def _process(self) -> None:
        frames = self._frames
        while not self._closing:
            if not frames:
                if self._draining:
                    self.close()
                    return
                self._frame_ready.clear()
                await self._frame_ready.wait()
                continue
            frame = frames.popleft()
            try:
                response = await self._handler(self, frame)
            except CloseConnection as e:
                if e.response and self._transport is not None:
                    self._transport.writelines(e.response)
                self.close()
                return
            except Exception as e:
                # A bug, not the client's fault; still never leave the client hanging.
                log_event(
                    _log,
                    logging.ERROR,
                    "request_processing_failed",
                    client=self.client_address,
                    reason=repr(e),
                )
                _log.debug("traceback", exc_info=e)
                self.close()
                return
            transport = self._transport
            if transport is None or transport.is_closing():
                return
            if response:
                transport.writelines(response)
            if not self._write_ready.is_set():
                await self._write_ready.wait()
            if self._reading_paused and len(frames) < self._max_queued:
                self._resume_reading()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None and not self._closing:
            self._reading_paused = False
            self._transport.resume_reading()

    def authenticated(
        self, principal: KafkaPrincipal, handler: FrameHandler, max_request_size: int
    ) -> None:
        """SASL authentication succeeded: the next frames go to `handler` with the larger
        size bound of authenticated connections."""
        self.principal = principal
        self._handler = handler
        self._max_request_size = max_request_size

    def reauthenticating(self, handler: FrameHandler, max_request_size: int) -> None:
        """A SASL re-authentication (KIP-368) began: the next frames go to `handler`, the
        authenticator, with its smaller size bound; the principal stays until it is done."""
        self._handler = handler
        self._max_request_size = max_request_size

    @property
    def idle(self) -> bool:
        """No request queued or in progress."""
        return not self._frames and not self._frame_ready.is_set()

    def close(self) -> None:
        if not self._closing and self._transport is not None:
            self._closing = True
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection now, unsent responses included."""
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    async def shutdown(self) -> None:
        """Stop reading, finish the requests already received, then close."""
        self._pause_reading()
        self._draining = True
        self._frame_ready.set()
        if self._processor is not None:
            await asyncio.wait({self._processor})
        self.close()
