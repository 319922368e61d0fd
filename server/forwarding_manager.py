"""A KRaft broker's forwarding of the requests only the active controller can handle
(KIP-590; Kafka's ForwardingManager and KafkaApis.maybeForwardToController).

The client's request goes unchanged, header and all, inside an Envelope that carries
the client's principal (Kafka's DefaultPrincipalData, version-prefixed) and address;
the controller handles it as if the client had sent it and returns the response,
header and all, which goes back to the client as it is. When the controller cannot be
reached within the retry timeout, or refuses the envelope, the client gets the
request's error response: REQUEST_TIMED_OUT, or the envelope's error
(UNSUPPORTED_VERSION as it is), as Kafka's ForwardingManagerImpl answers;
``error_response`` (the one a standby controller answers with too, from
``protocol/error_responses``) builds it.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence
from typing import Final

from kio.schema.default_principal_data.v0.data import DefaultPrincipalData

from tiercel.protocol.entities import ChunkWriter, decode_request_body, encode_entity
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.request_header import size_prefix
from tiercel.server.network.connection import Buffer
from tiercel.server.node_to_controller_channel import (
    ControllerRequestTimeoutError,
    NodeToControllerChannel,
)

__all__ = [
    "FORWARDED_APIS",
    "FORWARDED_ONLY_APIS",
    "ForwardingManager",
    "deserialize_principal",
    "serialize_principal",
]

_ENVELOPE: Final = 58
_ENVELOPE_VERSIONS: Final = (0, 0)

# The forwardable APIs (Kafka's ApiKeys with forwardable) Tiercel serves in KRaft mode.
CREATE_TOPICS, DELETE_TOPICS, ALTER_CONFIGS, CREATE_PARTITIONS = 19, 20, 33, 37
CREATE_ACLS, DELETE_ACLS = 30, 31
ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS = 43, 44
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
ALTER_USER_SCRAM_CREDENTIALS = 51
DESCRIBE_QUORUM = 55
# APIs a KRaft broker serves only by forwarding them, with the versions it accepts
# (Kafka 4.0's DescribeQuorum, which kafka-metadata-quorum --bootstrap-server sends;
# AlterUserScramCredentials, whose credentials live only in the metadata log).
FORWARDED_ONLY_APIS: Final = {DESCRIBE_QUORUM: (0, 2), ALTER_USER_SCRAM_CREDENTIALS: (0, 0)}
FORWARDED_APIS: Final = frozenset(
    {
        DESCRIBE_QUORUM,
        CREATE_TOPICS,
        DELETE_TOPICS,
        ALTER_CONFIGS,
        CREATE_PARTITIONS,
        CREATE_ACLS,
        DELETE_ACLS,
        ELECT_LEADERS,
        INCREMENTAL_ALTER_CONFIGS,
        ALTER_PARTITION_REASSIGNMENTS,
        LIST_PARTITION_REASSIGNMENTS,
        ALTER_USER_SCRAM_CREDENTIALS,
    }
)
_PRINCIPAL_VERSION: Final = struct.Struct(">h")


def serialize_principal(principal_type: str, name: str) -> bytes:
    """Kafka's DefaultKafkaPrincipalBuilder.serialize: DefaultPrincipalData, prefixed by
    its version as an int16."""
    writer = ChunkWriter()
    encode_entity(
        writer, DefaultPrincipalData(type_=principal_type, name=name, token_authenticated=False)
    )
    return _PRINCIPAL_VERSION.pack(0) + b"".join(bytes(c) for c in writer.chunks())


def deserialize_principal(data: bytes) -> tuple[str, str]:
    """(type, name) of `serialize_principal`'s bytes (Kafka's
    DefaultKafkaPrincipalBuilder.deserialize); ValueError when they are not that."""
    if len(data) < _PRINCIPAL_VERSION.size:
        raise ValueError("principal data too short")
    (version,) = _PRINCIPAL_VERSION.unpack_from(data)
    if version != 0:
        raise ValueError(f"unsupported principal data version {version}")
    try:
        decoded = decode_request_body(DefaultPrincipalData, data, _PRINCIPAL_VERSION.size)
    except Exception as e:  # kio's native reader has several exception types
        raise ValueError(f"malformed principal data: {e}") from e
    return decoded.type_, decoded.name


class ForwardingManager:
    """Event-loop only."""

    def __init__(self, channel: NodeToControllerChannel, retry_timeout_s: float) -> None:
        self._channel = channel
        self._retry_timeout_s = retry_timeout_s

    async def forward(
        self, frame: bytes | memoryview, client_address: str, principal: tuple[str, str]
    ) -> Sequence[Buffer] | ErrorCode:
        """The controller's response frame to ``frame``, or the error to answer the
        client with."""
        body = {
            "request_data": bytes(frame),
            "request_principal": serialize_principal(*principal),
            "client_host_address": _address_bytes(client_address),
        }
        try:
            response = await self._channel.send(
                _ENVELOPE, _ENVELOPE_VERSIONS, body, self._retry_timeout_s
            )
        except ControllerRequestTimeoutError:
            return ErrorCode.request_timed_out
        if response.error_code != ErrorCode.none:
            return ErrorCode(response.error_code)
        data = response.response_data
        if data is None:
            return ErrorCode.unknown_server_error
        return [size_prefix(len(data)), data]

    def close(self) -> None:
        self._channel.close()


def _address_bytes(address: str) -> bytes:
    """The client's IP address as the Envelope carries it (InetAddress.getAddress);
    ``address`` is a connection's "host:port" (an IPv6 host unbracketed)."""
    host = address.rpartition(":")[0]
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""
