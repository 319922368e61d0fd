"""A raw-socket Kafka client for tests: well-formed requests from kio, or any bytes at all.

Frame layout on the wire (both directions):

    size            int32   bytes that follow
    request header  v1 (api_key int16, api_version int16, correlation_id int32,
                    client_id int16-string) or v2 (v1 + tagged fields) for flexible APIs
    body            the kio entity of (api_key, api_version)

A response frame is ``size``, ResponseHeader v0 (correlation_id) or v1 (+ tagged fields)
and the body; ApiVersions always answers with header v0 (KIP-511).

`WireClient` is a blocking socket wrapper (one test thread; not thread-safe). It knows
its own ``ip:port`` (`address`), which is what the broker logs as ``client=``, so a test
can find the log line about exactly this connection.
"""

from __future__ import annotations

import dataclasses
import io
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any, Final

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

_SIZE: Final = struct.Struct(">i")
_API_VERSIONS_KEY: Final = 18


class ConnectionClosedError(Exception):
    """The server closed the connection (EOF or reset) before a whole frame arrived."""


def size_prefixed(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


def encode_body(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def encode_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    header_type = RequestHeaderV2 if flexible else RequestHeaderV1
    header = header_type(
        request_api_key=i16(api_key),
        request_api_version=i16(api_version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    return encode_body(header)


def encode_request(request: Any, correlation_id: int, client_id: str | None = "wire-test") -> bytes:
    """The whole frame (size prefix included) for a kio request entity."""
    header = encode_header(
        request.__api_key__,
        request.__version__,
        correlation_id,
        client_id,
        request.__flexible__,
    )
    return size_prefixed(header + encode_body(request))


def response_type_for(api_key: int, api_version: int) -> type[Any]:
    return load_response_schema(api_key, api_version)


def decode_response(frame: bytes, api_key: int, api_version: int) -> tuple[int, Any]:
    """(correlation_id, entity) of a response frame without its size prefix."""
    response_type = response_type_for(api_key, api_version)
    (correlation_id,) = _SIZE.unpack_from(frame, 0)
    pos = 4
    if api_key != _API_VERSIONS_KEY and response_type.__header_schema__.__version__ >= 1:
        pos += 1  # empty tagged fields: the broker sends none
        if frame[4] != 0:
            raise AssertionError(f"unexpected response header tagged fields {frame[4]}")
    entity, size = entity_reader(response_type)(memoryview(frame), pos)
    if pos + size != len(frame):
        raise AssertionError(f"response has {len(frame) - pos - size} trailing bytes")
    return correlation_id, entity


def error_codes(entity: Any, path: str = "") -> Iterator[tuple[str, ErrorCode]]:
    """Every ``ErrorCode`` field of a kio entity, nested entities and tuples of them
    included, as (dotted path, code): a response's top-level code and each topic's,
    partition's, member's ... code."""
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        where = f"{path}.{field.name}" if path else field.name
        items = value if isinstance(value, tuple) else (value,)
        for index, item in enumerate(items):
            at = f"{where}[{index}]" if isinstance(value, tuple) else where
            if isinstance(item, ErrorCode):
                yield at, item
            elif dataclasses.is_dataclass(item) and not isinstance(item, type):
                yield from error_codes(item, at)


class WireClient:
    """One blocking client connection. Not thread-safe: one test thread uses it.

    Invariant: ``address`` is the local ``ip:port`` of ``sock``, as the broker sees it.
    """

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        local = self.sock.getsockname()
        self.address = f"{local[0]}:{local[1]}"
        self._next_correlation_id = 1

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(
        self, request: Any, correlation_id: int | None = None, client_id: str | None = "wire-test"
    ) -> int:
        """Send one request; returns its correlation id."""
        if correlation_id is None:
            correlation_id = self._next_correlation_id
            self._next_correlation_id += 1
        self.send_raw(encode_request(request, correlation_id, client_id))
        return correlation_id

    def _recv_exactly(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            try:
                data = self.sock.recv(n - len(chunks))
            except ConnectionResetError as e:
                raise ConnectionClosedError("connection reset by the server") from e
            if not data:
                raise ConnectionClosedError(f"EOF after {len(chunks)} of {n} bytes")
            chunks += data
        return bytes(chunks)

    def read_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self._recv_exactly(4))
        return self._recv_exactly(size)

    def read_response(self, api_key: int, api_version: int) -> tuple[int, Any]:
        return decode_response(self.read_frame(), api_key, api_version)

    def request(self, request: Any, client_id: str | None = "wire-test") -> Any:
        """Send ``request``, read its response, check the correlation id; the entity."""
        correlation_id = self.send(request, client_id=client_id)
        got, response = self.read_response(request.__api_key__, request.__version__)
        if got != correlation_id:
            raise AssertionError(f"correlation id {got} answers request {correlation_id}")
        return response

    def closed_by_server(self, timeout: float = 5.0) -> bool:
        """True once the server has closed this connection (EOF or RST) within ``timeout``.

        Any bytes the server sends first are drained, so a response followed by a close
        counts as closed; a connection still open at the deadline gives False.
        """
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
            if not data:
                return True
