"""The values of ``__remote_log_metadata`` records, byte for byte as Kafka writes them
(Kafka's RemoteLogMetadataSerde over BytesApiMessageSerde; the schemas are Kafka's
``storage/src/main/resources/message/*Record.json``). Records have a null key.

A value is a BytesApiMessageSerde frame: three unsigned varints, then the message in its
version-0 flexible encoding (compact strings/bytes/arrays with length + 1, uuids as 16
bytes, every struct followed by its tagged fields; `protocol.message_codec`):

    frame version   uvarint  1 (AbstractApiMessageSerde's DEFAULT_FRAME_VERSION)
    api key         uvarint  0 RemoteLogSegmentMetadataRecord
                             1 RemoteLogSegmentMetadataUpdateRecord
                             2 RemotePartitionDeleteMetadataRecord
                             3 RemoteLogSegmentMetadataSnapshotRecord
    version         uvarint  0

    TopicIdPartitionEntry       Name string, Id uuid, Partition int32, tags
    RemoteLogSegmentIdEntry     TopicIdPartitionEntry, Id uuid, tags
    SegmentLeaderEpochEntry     LeaderEpoch int32, Offset int64, tags

    0  RemoteLogSegmentIdEntry, StartOffset int64, EndOffset int64, BrokerId int32,
       MaxTimestampMs int64, EventTimestampMs int64, SegmentLeaderEpochs [entry] (by
       epoch, as Kafka's TreeMap iterates), SegmentSizeInBytes int32,
       CustomMetadata nullable bytes, RemoteLogSegmentState int8, tags (tag 0:
       TxnIndexEmpty bool, KIP-1058, written only when true)
    1  RemoteLogSegmentIdEntry, BrokerId int32, EventTimestampMs int64,
       CustomMetadata nullable bytes, RemoteLogSegmentState int8, tags
    2  TopicIdPartitionEntry, BrokerId int32, EventTimestampMs int64,
       RemotePartitionDeleteState int8, tags
    3  SegmentId uuid, StartOffset int64, EndOffset int64, BrokerId int32,
       MaxTimestampMs int64, EventTimestampMs int64, SegmentLeaderEpochs [entry],
       SegmentSizeInBytes int32, CustomMetadata nullable bytes, RemoteLogSegmentState
       int8, tags (tag 0: TxnIndexEmpty, as in 0)

States are their Kafka ids (RemoteLogSegmentState.id(), RemotePartitionDeleteState.id()).
Anything else — a frame version other than 1, an unknown api key or version, a
truncated field, an unknown state id, trailing bytes, values breaking the metadata's
invariants — raises `MessageFormatError`, never anything else. Pure; any thread.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import replace
from typing import Final

from tiercel.protocol.message_codec import MessageFormatError, RecordReader, RecordWriter
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_manager import (
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from tiercel.tiered.rlmm.remote_log_segment_metadata_snapshot import (
    RemoteLogSegmentMetadataSnapshot,
)
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

__all__ = ["RemoteLogMetadata", "deserialize", "serialize"]

RemoteLogMetadata = (
    RemoteLogSegmentMetadata
    | RemoteLogSegmentMetadataUpdate
    | RemotePartitionDeleteMetadata
    | RemoteLogSegmentMetadataSnapshot
)

_FRAME_VERSION: Final = 1
_VERSION: Final = 0
_SEGMENT_METADATA: Final = 0
_SEGMENT_METADATA_UPDATE: Final = 1
_PARTITION_DELETE: Final = 2
_SEGMENT_METADATA_SNAPSHOT: Final = 3
_TAG_TXN_INDEX_EMPTY: Final = 0
_TRUE: Final = b"\x01"
_BOOL: Final = struct.Struct("?")


def serialize(metadata: RemoteLogMetadata) -> bytes:
    """The record value Kafka's RemoteLogMetadataSerde.serialize writes."""
    w = RecordWriter(None, flexible=True)
    tags: list[tuple[int, bytes]] = []
    match metadata:
        case RemoteLogSegmentMetadata():
            _header(w, _SEGMENT_METADATA)
            _segment_id(w, metadata.remote_log_segment_id)
            _segment_fields(w, metadata)
            tags = _segment_tags(metadata)
        case RemoteLogSegmentMetadataUpdate():
            _header(w, _SEGMENT_METADATA_UPDATE)
            _segment_id(w, metadata.remote_log_segment_id)
            w.int32(metadata.broker_id)
            w.int64(metadata.event_timestamp_ms)
            w.nullable_bytes(metadata.custom_metadata)
            w.int8(metadata.state)
        case RemotePartitionDeleteMetadata():
            _header(w, _PARTITION_DELETE)
            _topic_id_partition(w, metadata.topic_id_partition)
            w.int32(metadata.broker_id)
            w.int64(metadata.event_timestamp_ms)
            w.int8(metadata.state)
        case RemoteLogSegmentMetadataSnapshot():
            _header(w, _SEGMENT_METADATA_SNAPSHOT)
            w.uuid(metadata.segment_id)
            _segment_fields(w, metadata)
            tags = _segment_tags(metadata)
    w.tagged_fields(tags)
    return bytes(w.out)


def _segment_tags(
    m: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot,
) -> list[tuple[int, bytes]]:
    """Records 0 and 3's tagged fields: TxnIndexEmpty only when true (its default is
    false, and Kafka writes a tagged field only when it is not its default)."""
    return [(_TAG_TXN_INDEX_EMPTY, _TRUE)] if m.txn_idx_empty else []


def _header(w: RecordWriter, api_key: int) -> None:
    w.uvarint(_FRAME_VERSION)
    w.uvarint(api_key)
    w.uvarint(_VERSION)


def _topic_id_partition(w: RecordWriter, partition: TopicIdPartition) -> None:
    w.string(partition.topic_partition.topic)
    w.uuid(partition.topic_id)
    w.int32(partition.topic_partition.partition)
    w.tagged_fields()


def _segment_id(w: RecordWriter, segment_id: RemoteLogSegmentId) -> None:
    _topic_id_partition(w, segment_id.topic_id_partition)
    w.uuid(segment_id.id)
    w.tagged_fields()


def _segment_fields(
    w: RecordWriter, m: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot
) -> None:
    """The fields records 0 and 3 share, after the segment's id."""
    w.int64(m.start_offset)
    w.int64(m.end_offset)
    w.int32(m.broker_id)
    w.int64(m.max_timestamp_ms)
    w.int64(m.event_timestamp_ms)
    epochs = sorted(m.segment_leader_epochs.items())
    w.array_length(len(epochs))
    for epoch, offset in epochs:
        w.int32(epoch)
        w.int64(offset)
        w.tagged_fields()
    w.int32(m.segment_size_in_bytes)
    w.nullable_bytes(m.custom_metadata)
    w.int8(m.state)


def deserialize(data: bytes | memoryview) -> RemoteLogMetadata:
    """The metadata a record value holds (Kafka's RemoteLogMetadataSerde.deserialize)."""
    r = RecordReader(data, 0, flexible=True)
    frame_version = r.uvarint()
    if frame_version != _FRAME_VERSION:
        raise MessageFormatError(f"unknown frame version {frame_version} (only 1 is)")
    api_key = r.uvarint()
    version = r.uvarint()
    if version != _VERSION:
        raise MessageFormatError(f"unsupported version {version} of record type {api_key}")
    try:
        metadata = _read_message(r, api_key)
        tags = r.tagged_fields()
    except MessageFormatError:
        raise
    except ValueError as e:  # an unknown state id, or values breaking an invariant
        raise MessageFormatError(f"record type {api_key}: {e}") from None
    r.end()
    if _TAG_TXN_INDEX_EMPTY in tags and isinstance(
        metadata, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot
    ):
        (empty,) = r.tagged_value(_BOOL, tags[_TAG_TXN_INDEX_EMPTY])
        metadata = replace(metadata, txn_idx_empty=empty)
    return metadata


def _read_message(r: RecordReader, api_key: int) -> RemoteLogMetadata:
    match api_key:
        case 0:
            segment_id = _read_segment_id(r)
            fields = _read_segment_fields(r)
            return RemoteLogSegmentMetadata(segment_id, *fields)
        case 1:
            segment_id = _read_segment_id(r)
            broker_id = r.int32()
            event_timestamp_ms = r.int64()
            custom_metadata = r.nullable_bytes()
            state = RemoteLogSegmentState(r.int8())
            return RemoteLogSegmentMetadataUpdate(
                segment_id, event_timestamp_ms, state, broker_id, custom_metadata
            )
        case 2:
            partition = _read_topic_id_partition(r)
            broker_id = r.int32()
            event_timestamp_ms = r.int64()
            delete_state = RemotePartitionDeleteState(r.int8())
            return RemotePartitionDeleteMetadata(
                partition, delete_state, event_timestamp_ms, broker_id
            )
        case 3:
            return RemoteLogSegmentMetadataSnapshot(r.uuid(), *_read_segment_fields(r))
    raise MessageFormatError(f"unknown record type {api_key}")


def _read_topic_id_partition(r: RecordReader) -> TopicIdPartition:
    name = r.string()
    topic_id = r.uuid()
    partition = r.int32()
    r.tagged_fields()
    return TopicIdPartition(topic_id, TopicPartition(name, partition))


def _read_segment_id(r: RecordReader) -> RemoteLogSegmentId:
    partition = _read_topic_id_partition(r)
    segment_id: uuid.UUID = r.uuid()
    r.tagged_fields()
    return RemoteLogSegmentId(partition.topic_id, partition.topic_partition, segment_id)


_SegmentFields = tuple[
    int, int, int, int, int, int, dict[int, int], RemoteLogSegmentState, bytes | None
]


def _read_segment_fields(r: RecordReader) -> _SegmentFields:
    """Records 0 and 3 after the id, in the order of the dataclasses' fields."""
    start_offset = r.int64()
    end_offset = r.int64()
    broker_id = r.int32()
    max_timestamp_ms = r.int64()
    event_timestamp_ms = r.int64()
    epochs: dict[int, int] = {}
    for _ in range(r.array_length()):
        epoch = r.int32()
        epochs[epoch] = r.int64()
        r.tagged_fields()
    size = r.int32()
    custom_metadata = r.nullable_bytes()
    state = RemoteLogSegmentState(r.int8())
    return (
        start_offset,
        end_offset,
        max_timestamp_ms,
        broker_id,
        event_timestamp_ms,
        size,
        epochs,
        state,
        custom_metadata,
    )
