"""The requests a controller listener answers for the quorum: ApiVersions and the Raft
RPCs (the Raft part of Kafka's ``ControllerApis``), as the frame handler of a
`SocketServer`.

A node that runs Raft without a broker's KafkaApis (a controller, or a test quorum)
serves its voters and observers with this; a broker adds the Raft RPCs to its own
dispatch table through `raft_request_handler` instead. Event-loop only; like Kafka's
SocketServer, one request of a connection at a time (a parked Fetch holds its
connection, and every peer has its own).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

from tiercel.protocol.entities import (
    build_entity,
    decode_request_body,
    encode_response_frame,
    request_class,
    response_class,
)
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.request_header import (
    API_VERSIONS_KEY,
    parse_request_header,
    peek_api,
)
from tiercel.server.network.connection import Buffer, CloseConnection, Connection
from tiercel.server.raft.kafka_raft_client import KafkaRaftClient
from tiercel.server.raft.raft_request_handler import handle_raft_request, is_raft_request
from tiercel.server.raft.raft_wire import RAFT_API_VERSIONS

__all__ = ["RaftApis"]

_log: Final = logging.getLogger("tiercel.raft")
_API_VERSIONS_VERSIONS: Final = (0, 4)


class RaftApis:
    """Event-loop only."""

    def __init__(self, client: KafkaRaftClient[Any]) -> None:
        self._client = client

    async def handle_frame(
        self, connection: Connection, frame: bytes | memoryview
    ) -> Sequence[Buffer] | None:
        try:
            api_key, api_version, correlation_id = peek_api(frame)
            if api_key == API_VERSIONS_KEY:
                return self._api_versions(api_version, correlation_id)
            if not is_raft_request(api_key, api_version):
                self._close(connection, f"unsupported api {api_key} v{api_version}")
            request_type = request_class(api_key, api_version)
            header = parse_request_header(frame, request_type.__flexible__)
            request = decode_request_body(request_type, frame, header.size)
        except CloseConnection:
            raise
        except Exception as e:  # kio's native reader has several exception types
            self._close(connection, f"invalid request: {type(e).__name__}: {e}")
        response = await handle_raft_request(
            self._client, api_key, api_version, correlation_id, request, connection.listener_name
        )
        return encode_response_frame(correlation_id, response)

    def _api_versions(self, api_version: int, correlation_id: int) -> list[Buffer]:
        """Kafka's ApiVersionsResponse of a controller listener; an unknown version is
        answered in v0 with UNSUPPORTED_VERSION, as KIP-511 asks."""
        low, high = _API_VERSIONS_VERSIONS
        versions = {**RAFT_API_VERSIONS, API_VERSIONS_KEY: _API_VERSIONS_VERSIONS}
        error = ErrorCode.none if low <= api_version <= high else ErrorCode.unsupported_version
        version = api_version if error == ErrorCode.none else 0
        values: Mapping[str, Any] = {
            "error_code": error,
            "api_keys": [
                {"api_key": key, "min_version": versions[key][0], "max_version": versions[key][1]}
                for key in sorted(versions)
            ],
            "throttle_time": 0,
            "finalized_features_epoch": -1,
        }
        entity = build_entity(response_class(API_VERSIONS_KEY, version), values, True)
        return encode_response_frame(correlation_id, entity)

    @staticmethod
    def _close(connection: Connection, reason: str) -> NoReturn:
        _log.warning("closing connection from %s: %s", connection.client_address, reason)
        raise CloseConnection()
