"""The client side of the wire framing: request frames out, response frames in.

Byte layout (big-endian), the mirror image of what `protocol.request_header` parses:

    request frame   size              int32   bytes that follow
                    request_api_key   int16   \\
                    api_version       int16    | RequestHeader v1; v2 (flexible APIs)
                    correlation_id    int32    | adds an empty tagged-field section
                    client_id         int16-length string (-1: null)
                    [tagged fields]   uvarint 0, v2 only
                    body              the kio request entity of (api_key, api_version)

    response frame  size              int32
                    correlation_id    int32   ResponseHeader v0; v1 (flexible APIs, except
                    [tagged fields]   uvarint  ApiVersions, KIP-511) adds tagged fields
                    body              the kio response entity

Sans-io: a broker talking to another broker (the replica fetcher) frames its requests
and parses the answers with these functions, then moves the bytes itself.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final

from kio.serial import entity_reader

from tiercel.protocol.entities import (
    ChunkWriter,
    build_entity,
    encode_entity,
    request_class,
    response_class,
)
from tiercel.protocol.request_header import skip_tagged_fields

__all__ = ["FrameError", "decode_response", "encode_request"]

_API_VERSIONS_KEY: Final = 18
_HEADER_PREFIX: Final = struct.Struct(">hhih")
_INT32: Final = struct.Struct(">i")


class FrameError(ValueError):
    """A response frame that cannot be decoded as the expected API and version."""


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body: Mapping[str, Any],
) -> list[bytes | bytearray | memoryview]:
    """The whole request frame, size prefix first, as chunks for ``writelines``.

    ``body`` holds Kafka's field names as nested mappings; fields the version lacks are
    ignored and missing ones take their schema defaults (`protocol.entities`)."""
    request_type = request_class(api_key, api_version)
    entity = build_entity(request_type, body)
    if client_id is None:
        header = _HEADER_PREFIX.pack(api_key, api_version, correlation_id, -1)
    else:
        encoded = client_id.encode()
        header = _HEADER_PREFIX.pack(api_key, api_version, correlation_id, len(encoded)) + encoded
    if request_type.__flexible__:
        header += b"\x00"  # no tagged fields
    writer = ChunkWriter()
    writer.write(header)
    encode_entity(writer, entity)
    return [_INT32.pack(writer.size), *writer.chunks()]


def decode_response(
    frame: bytes | bytearray | memoryview, api_key: int, api_version: int
) -> tuple[int, Any]:
    """(correlation id, kio response entity) of a frame without its size prefix."""
    response_type = response_class(api_key, api_version)
    view = memoryview(frame)
    if len(view) < _INT32.size:
        raise FrameError(f"response frame of {len(view)} bytes has no header")
    (correlation_id,) = _INT32.unpack_from(view, 0)
    pos = _INT32.size
    try:
        if api_key != _API_VERSIONS_KEY and response_type.__header_schema__.__version__ >= 1:
            pos = _skip_tagged_fields(view, pos)
        entity, _ = entity_reader(response_type)(view, pos)
    except FrameError:
        raise
    except Exception as e:  # kio's native reader raises its own underflow types
        raise FrameError(
            f"undecodable response to api {api_key} v{api_version}: {type(e).__name__}: {e}"
        ) from e
    return correlation_id, entity


def _skip_tagged_fields(view: memoryview, pos: int) -> int:
    pos = skip_tagged_fields(view, pos)
    if pos > len(view):
        raise FrameError("response header tagged fields run past the end of the frame")
    return pos
