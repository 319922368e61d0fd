"""The key and value schemas of __consumer_offsets records, byte for byte as Kafka's.

Every key and value starts with an int16 version. The key version says what the record
is (Kafka's OffsetCommitKey / GroupMetadataKey JSON schemas, group-coordinator module);
the value version says how the value is laid out. Big-endian; a STRING is an int16
length and UTF-8 bytes (-1 = null where nullable), BYTES an int32 length, an ARRAY an
int32 count. From value version 4 on the encoding is "flexible": COMPACT_STRING /
COMPACT_BYTES / COMPACT_ARRAY carry an unsigned varint of length + 1 (0 = null) and every
struct ends with tagged fields (a varint count, then per field varint tag, varint size,
bytes).

    key version 0, 1 — offset commit (Kafka writes 1)
        group string, topic string, partition int32
    key version 2 — group metadata
        group string

    OffsetCommitValue (key 0/1; Kafka writes 3, or 1 when the commit has an explicit
    expire timestamp from OffsetCommit v2-v4 retention_time)
        v0  offset int64, metadata string, commit_timestamp int64
        v1  offset int64, metadata string, commit_timestamp int64, expire_timestamp int64
        v2  offset int64, metadata string, commit_timestamp int64
        v3  offset int64, leader_epoch int32, metadata string, commit_timestamp int64
        v4  v3 in the flexible encoding, then tagged fields

    GroupMetadataValue (key 2; Kafka writes 3)
        protocol_type string, generation int32, protocol nullable string,
        leader nullable string, current_state_timestamp int64 (v2+), members array of
            member_id string, group_instance_id nullable string (v3+), client_id string,
            client_host string, rebalance_timeout int32 (v1+), session_timeout int32,
            subscription bytes, assignment bytes
        v4  v3 in the flexible encoding (tagged fields after each member and the value)

A tombstone is a key with a null value: the offset or group it names is deleted, and log
compaction later drops both. The primitives are in `protocol.message_codec`; the key
types of KIP-848 consumer groups (3-8, 16) are in `consumer_group_records` (here they
are UnknownKey).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tiercel.protocol.message_codec import (
    MessageFormatError,
    RecordReader,
    RecordWriter,
    record_version,
)

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "NO_EXPIRE_TIMESTAMP",
    "OFFSET_COMMIT_KEY_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataValue",
    "MessageFormatError",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "UnknownKey",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_value",
    "encode_key",
    "encode_offset_commit_value",
    "offset_commit_value_version",
]

OFFSET_COMMIT_KEY_VERSION: Final = 1
GROUP_METADATA_KEY_VERSION: Final = 2
GROUP_METADATA_VALUE_VERSION: Final = 3
_MAX_OFFSET_COMMIT_VALUE_VERSION: Final = 4
_MAX_GROUP_METADATA_VALUE_VERSION: Final = 4
_FIRST_FLEXIBLE_VERSION: Final = 4
NO_EXPIRE_TIMESTAMP: Final = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key version this broker does not know (Kafka logs and skips such records)."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """Invariant: ``expire_timestamp`` is -1 unless the commit asked for its own retention
    (then the value is written as version 1, the only one that stores it)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = NO_EXPIRE_TIMESTAMP


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadataValue, ...]


# --- keys ------------------------------------------------------------------------------


def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    if isinstance(key, OffsetCommitKey):
        writer = RecordWriter(OFFSET_COMMIT_KEY_VERSION, flexible=False)
        writer.string(key.group)
        writer.string(key.topic)
        writer.int32(key.partition)
    else:
        writer = RecordWriter(GROUP_METADATA_KEY_VERSION, flexible=False)
        writer.string(key.group)
    return bytes(writer.out)


def decode_key(buf: bytes | memoryview) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    version = record_version(buf)
    reader = RecordReader(buf, 2, flexible=False)
    if version in (0, 1):
        key: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(
            reader.string(), reader.string(), reader.int32()
        )
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(reader.string())
    else:
        return UnknownKey(version)
    reader.end()
    return key


# --- offset commit values --------------------------------------------------------------


def offset_commit_value_version(value: OffsetCommitValue) -> int:
    """The version Kafka writes: 1 when the commit carries its own expire timestamp."""
    return 1 if value.expire_timestamp != NO_EXPIRE_TIMESTAMP else 3


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    if version is None:
        version = offset_commit_value_version(value)
    if not 0 <= version <= _MAX_OFFSET_COMMIT_VALUE_VERSION:
        raise MessageFormatError(f"unknown offset commit value version {version}")
    writer = RecordWriter(version, flexible=version >= _FIRST_FLEXIBLE_VERSION)
    writer.int64(value.offset)
    if version >= 3:
        writer.int32(value.leader_epoch)
    writer.string(value.metadata)
    writer.int64(value.commit_timestamp)
    if version == 1:
        writer.int64(value.expire_timestamp)
    writer.tagged_fields()
    return bytes(writer.out)


def decode_offset_commit_value(buf: bytes | memoryview) -> OffsetCommitValue:
    version = record_version(buf)
    if not 0 <= version <= _MAX_OFFSET_COMMIT_VALUE_VERSION:
        raise MessageFormatError(f"unknown offset commit value version {version}")
    reader = RecordReader(buf, 2, flexible=version >= _FIRST_FLEXIBLE_VERSION)
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else -1
    metadata = reader.string()
    commit_timestamp = reader.int64()
    expire_timestamp = reader.int64() if version == 1 else NO_EXPIRE_TIMESTAMP
    reader.tagged_fields()
    reader.end()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


# --- group metadata values -------------------------------------------------------------


def encode_group_metadata_value(
    value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION
) -> bytes:
    if not 0 <= version <= _MAX_GROUP_METADATA_VALUE_VERSION:
        raise MessageFormatError(f"unknown group metadata value version {version}")
    writer = RecordWriter(version, flexible=version >= _FIRST_FLEXIBLE_VERSION)
    writer.string(value.protocol_type)
    writer.int32(value.generation)
    writer.string(value.protocol)
    writer.string(value.leader)
    if version >= 2:
        writer.int64(value.current_state_timestamp)
    writer.array_length(len(value.members))
    for member in value.members:
        writer.string(member.member_id)
        if version >= 3:
            writer.string(member.group_instance_id)
        writer.string(member.client_id)
        writer.string(member.client_host)
        if version >= 1:
            writer.int32(member.rebalance_timeout)
        writer.int32(member.session_timeout)
        writer.bytes_(member.subscription)
        writer.bytes_(member.assignment)
        writer.tagged_fields()
    writer.tagged_fields()
    return bytes(writer.out)


def decode_group_metadata_value(buf: bytes | memoryview) -> GroupMetadataValue:
    version = record_version(buf)
    if not 0 <= version <= _MAX_GROUP_METADATA_VALUE_VERSION:
        raise MessageFormatError(f"unknown group metadata value version {version}")
    reader = RecordReader(buf, 2, flexible=version >= _FIRST_FLEXIBLE_VERSION)
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    current_state_timestamp = reader.int64() if version >= 2 else -1
    members = tuple(_read_member(reader, version) for _ in range(reader.array_length()))
    reader.tagged_fields()
    reader.end()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, current_state_timestamp, members
    )


def _read_member(reader: RecordReader, version: int) -> MemberMetadataValue:
    member_id = reader.string()
    group_instance_id = reader.nullable_string() if version >= 3 else None
    client_id = reader.string()
    client_host = reader.string()
    rebalance_timeout = reader.int32() if version >= 1 else -1
    session_timeout = reader.int32()
    if version == 0:
        # Version 0 had no rebalance timeout: Kafka loads the session timeout in its place.
        rebalance_timeout = session_timeout
    subscription = reader.bytes_()
    assignment = reader.bytes_()
    reader.tagged_fields()
    return MemberMetadataValue(
        member_id,
        group_instance_id,
        client_id,
        client_host,
        rebalance_timeout,
        session_timeout,
        subscription,
        assignment,
    )
