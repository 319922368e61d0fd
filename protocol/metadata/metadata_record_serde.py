"""The value of a record in ``__cluster_metadata``: a metadata record framed with its
type and version, byte for byte as Kafka's MetadataRecordSerde (an
AbstractApiMessageSerde) writes it and ``kafka-dump-log --cluster-metadata-decoder``
reads it:

    frame version   uvarint   1 (AbstractApiMessageSerde.DEFAULT_FRAME_VERSION)
    api key         uvarint   the record's type (MetadataRecordType)
    version         uvarint   the record's version
    message         the record in that version (`message_schema`)

The key of such a record is null. A frame version of 0 (KRaft's 2.8 preview), any other
frame version, an api key or version past 32767 or unknown, a message that does not
parse, and bytes after the message are refused with `MetadataParseError`, as Kafka's
read refuses them. Pure; any thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tiercel.protocol.metadata.flexible_encoding import (
    MetadataParseError,
    read_uvarint,
    write_uvarint,
)
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_record_type import record_class

__all__ = [
    "ApiMessageAndVersion",
    "MetadataParseError",
    "MetadataRecordSerde",
    "deserialize",
    "serialize",
]

_FRAME_VERSION: Final = 1
_MAX_SHORT: Final = 0x7FFF


@dataclass(frozen=True, slots=True)
class ApiMessageAndVersion:
    """A record and the version it is (to be) written in (Kafka's ApiMessageAndVersion)."""

    message: MetadataRecord
    version: int


def serialize(record: ApiMessageAndVersion) -> bytes:
    """The record value Kafka's MetadataRecordSerde.write produces."""
    message = bytearray()
    record.message.write_to(message, record.version)
    out = bytearray()
    write_uvarint(out, _FRAME_VERSION)
    write_uvarint(out, record.message.API_KEY)
    write_uvarint(out, record.version)
    return bytes(out + message)


def deserialize(data: bytes | memoryview) -> ApiMessageAndVersion:
    """The record a value holds (Kafka's MetadataRecordSerde.read)."""
    if len(data) > 3 and data[0] == _FRAME_VERSION and data[1] < 0x80 and data[2] < 0x80:
        # The header of every record Kafka 4.0 writes: three one-byte varints.
        api_key, version, pos = data[1], data[2], 3
    else:
        api_key, version, pos = _read_header(data)
    cls = record_class(api_key)
    message, pos = cls.read_from(data, pos, version)
    if pos != len(data):
        raise MetadataParseError(f"Found {len(data) - pos} byte(s) of garbage after {cls.__name__}")
    return ApiMessageAndVersion(message, version)


class MetadataRecordSerde:
    """The metadata records' serde for the Raft client, its snapshots and the bootstrap
    file (Kafka's MetadataRecordSerde); it satisfies the Raft ``RecordSerde`` protocol."""

    def write(self, record: ApiMessageAndVersion) -> bytes:
        return serialize(record)

    def read(self, data: memoryview) -> ApiMessageAndVersion:
        return deserialize(data)


def _read_header(data: bytes | memoryview) -> tuple[int, int, int]:
    frame_version, pos = _read_short(data, 0, "frame version")
    if frame_version == 0:
        raise MetadataParseError(
            "Could not deserialize metadata record with frame version 0: upgrades from "
            "the preview release of KRaft in 2.8 are not supported"
        )
    if frame_version != _FRAME_VERSION:
        raise MetadataParseError(
            f"Could not deserialize metadata record due to unknown frame version "
            f"{frame_version} (only frame version {_FRAME_VERSION} is supported)"
        )
    api_key, pos = _read_short(data, pos, "type")
    version, pos = _read_short(data, pos, "version")
    return api_key, version, pos


def _read_short(data: bytes | memoryview, pos: int, entity: str) -> tuple[int, int]:
    value, pos = read_uvarint(data, pos)
    if value > _MAX_SHORT:
        raise MetadataParseError(f"Value for {entity} was too large.")
    return value, pos
