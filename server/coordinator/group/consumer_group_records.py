"""The __consumer_offsets records of KIP-848 consumer groups, byte for byte as Kafka's.

A key's int16 version is the record type (Kafka's group-coordinator JSON schemas). Keys
use the classic encoding (int16-length strings); every value is version 0 in the
flexible encoding (compact strings and arrays, tagged fields after every struct; see
`protocol.message_codec`). Unknown tagged fields are skipped when reading, so values
written by a newer Kafka (for instance the ClassicMemberMetadata tag of a member that
joined with the classic protocol, or a group's metadata hash) still load.

    key  3  ConsumerGroupMetadataKey                 group string
    key  4  ConsumerGroupPartitionMetadataKey        group string
    key  5  ConsumerGroupMemberMetadataKey           group string, member_id string
    key  6  ConsumerGroupTargetAssignmentMetadataKey group string
    key  7  ConsumerGroupTargetAssignmentMemberKey   group string, member_id string
    key  8  ConsumerGroupCurrentMemberAssignmentKey  group string, member_id string
    key 16  ConsumerGroupRegularExpressionKey        group string, regular_expression string

    ConsumerGroupMetadataValue                  epoch int32
    ConsumerGroupPartitionMetadataValue         topics [topic_id uuid, topic_name string,
                                                 num_partitions int32,
                                                 partition_metadata [partition int32,
                                                                     racks [string]]]
    ConsumerGroupMemberMetadataValue            instance_id string?, rack_id string?,
                                                client_id string, client_host string,
                                                subscribed_topic_names [string],
                                                subscribed_topic_regex string?,
                                                rebalance_timeout_ms int32,
                                                server_assignor string?
    ConsumerGroupTargetAssignmentMetadataValue  assignment_epoch int32
    ConsumerGroupTargetAssignmentMemberValue    topic_partitions [topic_id uuid,
                                                                  partitions [int32]]
    ConsumerGroupCurrentMemberAssignmentValue   member_epoch int32,
                                                previous_member_epoch int32, state int8,
                                                assigned_partitions [topic_id uuid,
                                                                     partitions [int32]],
                                                partitions_pending_revocation (the same)
    ConsumerGroupRegularExpressionValue         topics [string], version int64,
                                                timestamp int64

Rack information per partition is written as an empty list, as Kafka 4 does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.message_codec import (
    MessageFormatError,
    RecordReader,
    RecordWriter,
    record_version,
)

CONSUMER_GROUP_METADATA_KEY_VERSION: Final = 3
CONSUMER_GROUP_PARTITION_METADATA_KEY_VERSION: Final = 4
CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION: Final = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION: Final = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION: Final = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION: Final = 8
CONSUMER_GROUP_REGULAR_EXPRESSION_KEY_VERSION: Final = 16
_VALUE_VERSION: Final = 0


# --- keys ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group: str
    regular_expression: str


ConsumerGroupKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)

_KEY_VERSIONS: Final[dict[type[ConsumerGroupKey], int]] = {
    ConsumerGroupMetadataKey: CONSUMER_GROUP_METADATA_KEY_VERSION,
    ConsumerGroupPartitionMetadataKey: CONSUMER_GROUP_PARTITION_METADATA_KEY_VERSION,
    ConsumerGroupMemberMetadataKey: CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION,
    ConsumerGroupTargetAssignmentMetadataKey: CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION,
    ConsumerGroupTargetAssignmentMemberKey: CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION,
    ConsumerGroupCurrentMemberAssignmentKey: CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION,
    ConsumerGroupRegularExpressionKey: CONSUMER_GROUP_REGULAR_EXPRESSION_KEY_VERSION,
}
_KEY_READERS: Final[dict[int, Callable[[RecordReader], ConsumerGroupKey]]] = {
    CONSUMER_GROUP_METADATA_KEY_VERSION: lambda r: ConsumerGroupMetadataKey(r.string()),
    CONSUMER_GROUP_PARTITION_METADATA_KEY_VERSION: lambda r: ConsumerGroupPartitionMetadataKey(
        r.string()
    ),
    CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION: lambda r: ConsumerGroupMemberMetadataKey(
        r.string(), r.string()
    ),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION: (
        lambda r: ConsumerGroupTargetAssignmentMetadataKey(r.string())
    ),
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION: (
        lambda r: ConsumerGroupTargetAssignmentMemberKey(r.string(), r.string())
    ),
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION: (
        lambda r: ConsumerGroupCurrentMemberAssignmentKey(r.string(), r.string())
    ),
    CONSUMER_GROUP_REGULAR_EXPRESSION_KEY_VERSION: (
        lambda r: ConsumerGroupRegularExpressionKey(r.string(), r.string())
    ),
}


def encode_consumer_group_key(key: ConsumerGroupKey) -> bytes:
    writer = RecordWriter(_KEY_VERSIONS[type(key)], flexible=False)
    writer.string(key.group)
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        writer.string(key.regular_expression)
    elif isinstance(
        key,
        ConsumerGroupMemberMetadataKey
        | ConsumerGroupTargetAssignmentMemberKey
        | ConsumerGroupCurrentMemberAssignmentKey,
    ):
        writer.string(key.member_id)
    return bytes(writer.out)


def decode_consumer_group_key(buf: bytes | memoryview) -> ConsumerGroupKey | None:
    """The key, or None when its version is not a consumer group record type."""
    read = _KEY_READERS.get(record_version(buf))
    if read is None:
        return None
    reader = RecordReader(buf, 2, flexible=False)
    key = read(reader)
    reader.end()
    return key


# --- values ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicPartitionsValue:
    """Partitions of one topic, by topic id."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadataValue:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[TopicMetadataValue, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    """Invariant: ``subscribed_topic_regex`` is "" (as Kafka writes it) or a regex;
    a null read back from the log is kept as None."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: tuple[TopicPartitionsValue, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitionsValue, ...]
    partitions_pending_revocation: tuple[TopicPartitionsValue, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: tuple[str, ...]
    version: int
    timestamp: int


ConsumerGroupValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)

_VALUE_FOR_KEY: Final[dict[type[ConsumerGroupKey], type[ConsumerGroupValue]]] = {
    ConsumerGroupMetadataKey: ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey: ConsumerGroupPartitionMetadataValue,
    ConsumerGroupMemberMetadataKey: ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMetadataKey: ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey: ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupCurrentMemberAssignmentKey: ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupRegularExpressionKey: ConsumerGroupRegularExpressionValue,
}


def value_type_for(key: ConsumerGroupKey) -> type[ConsumerGroupValue]:
    return _VALUE_FOR_KEY[type(key)]


def _write_topic_partitions(writer: RecordWriter, values: tuple[TopicPartitionsValue, ...]) -> None:
    writer.array_length(len(values))
    for value in values:
        writer.uuid(value.topic_id)
        writer.int32_array(value.partitions)
        writer.tagged_fields()


def _read_topic_partitions(reader: RecordReader) -> tuple[TopicPartitionsValue, ...]:
    out = []
    for _ in range(reader.array_length()):
        topic_id = reader.uuid()
        partitions = reader.int32_array()
        reader.tagged_fields()
        out.append(TopicPartitionsValue(topic_id, partitions))
    return tuple(out)


def _write_value_body(writer: RecordWriter, value: ConsumerGroupValue) -> None:
    if isinstance(value, ConsumerGroupMetadataValue):
        writer.int32(value.epoch)
    elif isinstance(value, ConsumerGroupPartitionMetadataValue):
        writer.array_length(len(value.topics))
        for topic in value.topics:
            writer.uuid(topic.topic_id)
            writer.string(topic.topic_name)
            writer.int32(topic.num_partitions)
            writer.array_length(0)  # partition racks: none, as Kafka 4 writes
            writer.tagged_fields()
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        writer.string(value.instance_id)
        writer.string(value.rack_id)
        writer.string(value.client_id)
        writer.string(value.client_host)
        writer.string_array(value.subscribed_topic_names)
        writer.string(value.subscribed_topic_regex)
        writer.int32(value.rebalance_timeout_ms)
        writer.string(value.server_assignor)
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        writer.int32(value.assignment_epoch)
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        _write_topic_partitions(writer, value.topic_partitions)
    elif isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        writer.int32(value.member_epoch)
        writer.int32(value.previous_member_epoch)
        writer.int8(value.state)
        _write_topic_partitions(writer, value.assigned_partitions)
        _write_topic_partitions(writer, value.partitions_pending_revocation)
    else:
        writer.string_array(value.topics)
        writer.int64(value.version)
        writer.int64(value.timestamp)


def encode_consumer_group_value(value: ConsumerGroupValue) -> bytes:
    writer = RecordWriter(_VALUE_VERSION, flexible=True)
    _write_value_body(writer, value)
    writer.tagged_fields()
    return bytes(writer.out)


def _read_partition_metadata(reader: RecordReader) -> ConsumerGroupPartitionMetadataValue:
    topics = []
    for _ in range(reader.array_length()):
        topic_id = reader.uuid()
        name = reader.string()
        num_partitions = reader.int32()
        for _partition in range(reader.array_length()):
            reader.int32()
            reader.string_array()  # racks: not used by the assignors here
            reader.tagged_fields()
        reader.tagged_fields()
        topics.append(TopicMetadataValue(topic_id, name, num_partitions))
    return ConsumerGroupPartitionMetadataValue(tuple(topics))


def _read_member_metadata(reader: RecordReader) -> ConsumerGroupMemberMetadataValue:
    return ConsumerGroupMemberMetadataValue(
        instance_id=reader.nullable_string(),
        rack_id=reader.nullable_string(),
        client_id=reader.string(),
        client_host=reader.string(),
        subscribed_topic_names=reader.string_array(),
        subscribed_topic_regex=reader.nullable_string(),
        rebalance_timeout_ms=reader.int32(),
        server_assignor=reader.nullable_string(),
    )


def _read_value_body(reader: RecordReader, kind: type[ConsumerGroupValue]) -> ConsumerGroupValue:
    if kind is ConsumerGroupMetadataValue:
        return ConsumerGroupMetadataValue(reader.int32())
    if kind is ConsumerGroupPartitionMetadataValue:
        return _read_partition_metadata(reader)
    if kind is ConsumerGroupMemberMetadataValue:
        return _read_member_metadata(reader)
    if kind is ConsumerGroupTargetAssignmentMetadataValue:
        return ConsumerGroupTargetAssignmentMetadataValue(reader.int32())
    if kind is ConsumerGroupTargetAssignmentMemberValue:
        return ConsumerGroupTargetAssignmentMemberValue(_read_topic_partitions(reader))
    if kind is ConsumerGroupCurrentMemberAssignmentValue:
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=reader.int32(),
            previous_member_epoch=reader.int32(),
            state=reader.int8(),
            assigned_partitions=_read_topic_partitions(reader),
            partitions_pending_revocation=_read_topic_partitions(reader),
        )
    return ConsumerGroupRegularExpressionValue(
        reader.string_array(), reader.int64(), reader.int64()
    )


def decode_consumer_group_value(
    key: ConsumerGroupKey, buf: bytes | memoryview
) -> ConsumerGroupValue:
    """The value of a record with ``key``; raises MessageFormatError on an unknown
    version or bytes that do not parse."""
    version = record_version(buf)
    if version != _VALUE_VERSION:
        raise MessageFormatError(f"unknown {type(key).__name__} value version {version}")
    reader = RecordReader(buf, 2, flexible=True)
    value = _read_value_body(reader, value_type_for(key))
    reader.tagged_fields()
    reader.end()
    return value
