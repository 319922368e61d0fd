"""A scripted Kafka broker on a local socket for unit tests of inter-broker clients:
it answers ApiVersions with the versions given and every other API with the answer
scripted for it, a response body or a function of the request that gives one (hanging
up on an API without one), and keeps what it decoded."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Mapping
from typing import Any

from tiercel.protocol.entities import (
    ChunkWriter,
    build_entity,
    decode_request_body,
    encode_entity,
    request_class,
    response_class,
)
from tiercel.protocol.request_header import parse_request_header, peek_api, response_header_bytes
from tiercel.server.replication.broker_client import Endpoint

_SIZE = struct.Struct(">i")
# A response body, or what gives it from the decoded request.
Answer = dict[str, Any] | Callable[[Any], dict[str, Any]]


class ScriptedLeader:
    """Answers ApiVersions with ``versions`` and the other APIs from ``answers`` (hangs
    up on an API without one); keeps every (api key, version, request) it decoded."""

    def __init__(self, versions: Mapping[int, tuple[int, int]]) -> None:
        self.versions = dict(versions)
        self.answers: dict[int, Answer] = {}
        self.requests: list[tuple[int, int, Any]] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    @property
    def endpoint(self) -> Endpoint:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[:2]  # type: ignore[no-any-return]

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, _ = peek_api(frame)
                request_type = request_class(api_key, version)
                header = parse_request_header(frame, request_type.__flexible__)
                request = decode_request_body(request_type, frame, header.size)
                self.requests.append((api_key, version, request))
                if api_key == 18:
                    body: dict[str, Any] = {
                        "error_code": 0,
                        "api_keys": [
                            {"api_key": k, "min_version": lo, "max_version": hi}
                            for k, (lo, hi) in self.versions.items()
                        ],
                    }
                elif api_key in self.answers:
                    answer = self.answers[api_key]
                    body = answer(request) if callable(answer) else answer
                else:
                    return  # nothing scripted: hang up
                response_type = response_class(api_key, version)
                out = ChunkWriter()
                out.write(
                    response_header_bytes(
                        header.correlation_id, response_type.__header_schema__.__version__ >= 1
                    )
                )
                encode_entity(out, build_entity(response_type, body, fill_missing=True))
                writer.write(_SIZE.pack(out.size) + b"".join(bytes(c) for c in out.chunks()))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
