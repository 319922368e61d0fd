"""Request and response headers, and response framing.

A request frame (after the 4-byte size prefix) starts with the request header:

    RequestHeader v1 (non-flexible APIs)          RequestHeader v2 (flexible APIs)
      request_api_key     int16                     the same four fields, then
      request_api_version int16                     tagged fields (uvarint count,
      correlation_id      int32                     then per tag: uvarint tag,
      client_id           nullable int16-string     uvarint size, bytes)

``client_id`` keeps the int16-length encoding even in v2 (Kafka special-cases it). The
body follows. Which header version a request uses depends on whether its (API, version)
is flexible, so the fixed 8-byte prefix is read first, then the rest.

A response frame is the int32 size, then ResponseHeader v0 (correlation_id int32) or v1
(correlation_id + empty tagged fields), then the body. ApiVersions responses always use
v0 so that a client can read them whatever version it asked for (KIP-511).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from kio.serial.readers import read_unsigned_varint

_API: Final = struct.Struct(">hhi")
_PREFIX: Final = struct.Struct(">hhih")
_SIZE: Final = struct.Struct(">i")

API_VERSIONS_KEY: Final = 18


class InvalidRequestHeaderError(ValueError):
    """The frame is too short or its header is malformed; the connection must close."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int
    """Bytes the header occupies in the frame; the body starts here."""


def peek_api(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the fixed start of a request frame."""
    if len(frame) < _API.size:
        raise InvalidRequestHeaderError(f"request frame of {len(frame)} bytes has no header")
    api_key, api_version, correlation_id = _API.unpack_from(frame, 0)
    return api_key, api_version, correlation_id


def parse_request_header(frame: bytes | bytearray | memoryview, flexible: bool) -> RequestHeader:
    if len(frame) < _PREFIX.size:
        raise InvalidRequestHeaderError(f"request frame of {len(frame)} bytes has no header")
    api_key, api_version, correlation_id, client_id_len = _PREFIX.unpack_from(frame, 0)
    pos = _PREFIX.size
    client_id: str | None = None
    if client_id_len >= 0:
        end = pos + client_id_len
        if end > len(frame):
            raise InvalidRequestHeaderError("client_id runs past the end of the frame")
        try:
            client_id = bytes(frame[pos:end]).decode()
        except UnicodeDecodeError as e:
            raise InvalidRequestHeaderError("client_id is not UTF-8") from e
        pos = end
    elif client_id_len != -1:
        raise InvalidRequestHeaderError(f"invalid client_id length {client_id_len}")
    if flexible:
        pos = _skip_header_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def skip_tagged_fields(frame: bytes | bytearray | memoryview, pos: int) -> int:
    """The position after the tagged-field section starting at `pos`: a count, then per field
    a tag and a length-prefixed value, all unsigned varints (KIP-482). Unknown tags are
    skipped, as Kafka's generated readers keep them aside. The result is past the end of
    `frame` when a field's length says so: the caller checks; the varint reader's own
    underflow errors propagate."""
    count, n = read_unsigned_varint(frame, pos)
    pos += n
    for _ in range(count):
        _tag, n = read_unsigned_varint(frame, pos)
        pos += n
        length, n = read_unsigned_varint(frame, pos)
        pos += n + length
    return pos


def _skip_header_tagged_fields(frame: bytes | bytearray | memoryview, pos: int) -> int:
    try:
        pos = skip_tagged_fields(frame, pos)
    except Exception as e:  # kio's native reader raises its own underflow types
        raise InvalidRequestHeaderError(f"malformed header tagged fields: {e}") from e
    if pos > len(frame):
        raise InvalidRequestHeaderError("header tagged fields run past the end of the frame")
    return pos


def response_header_bytes(correlation_id: int, flexible_header: bool) -> bytes:
    """ResponseHeader v1 (flexible) or v0; the caller decides which (ApiVersions: v0)."""
    header = _SIZE.pack(correlation_id)
    return header + b"\x00" if flexible_header else header


def size_prefix(size: int) -> bytes:
    return _SIZE.pack(size)
