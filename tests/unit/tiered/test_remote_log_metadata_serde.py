"""The __remote_log_metadata record values against Kafka's format.

The golden values are derived by hand from Kafka's JSON schemas
(storage/src/main/resources/message/RemoteLogSegmentMetadataRecord.json and its three
siblings) and from BytesApiMessageSerde: the frame header is three unsigned varints
(frame version 1, the schema's apiKey, version 0); then each field in schema order, in
the flexible ("0+") encoding: int8/int32/int64 big-endian, uuid as its 16 bytes, a
compact string or bytes as uvarint(length + 1) then the bytes (0 = null), a compact
array as uvarint(count + 1), and after every struct (nested entries and the message
itself) its tagged fields, here uvarint 0 (none)."""

import uuid
from dataclasses import replace

import pytest

from tiercel.protocol.message_codec import MessageFormatError
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_manager import (
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from tiercel.tiered.rlmm.remote_log_metadata_serde import deserialize, serialize
from tiercel.tiered.rlmm.remote_log_segment_metadata_snapshot import (
    RemoteLogSegmentMetadataSnapshot,
)
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

TOPIC_ID = uuid.UUID("0102030405060708090a0b0c0d0e0f10")
SEGMENT_ID = uuid.UUID("a1a2a3a4a5a6a7a8a9aaabacadaeafb0")
TP = TopicIdPartition(TOPIC_ID, TopicPartition("foo", 5))
SEGMENT = RemoteLogSegmentId(TOPIC_ID, TopicPartition("foo", 5), SEGMENT_ID)

TOPIC_ID_HEX = "0102030405060708090a0b0c0d0e0f10"
SEGMENT_ID_HEX = "a1a2a3a4a5a6a7a8a9aaabacadaeafb0"
TOPIC_ID_PARTITION_HEX = (
    "04"
    + "666f6f"  # Name "foo": uvarint(3 + 1), UTF-8
    + TOPIC_ID_HEX  # Id
    + "00000005"  # Partition 5
    + "00"  # TopicIdPartitionEntry's tagged fields
)
SEGMENT_ID_ENTRY_HEX = TOPIC_ID_PARTITION_HEX + SEGMENT_ID_HEX + "00"  # Id, tags


def _hex(*parts: str) -> bytes:
    return bytes.fromhex("".join(parts))


SEGMENT_METADATA = RemoteLogSegmentMetadata(
    SEGMENT,
    start_offset=100,
    end_offset=199,
    max_timestamp_ms=1_700_000_000_000,
    broker_id=2,
    event_timestamp_ms=1_700_000_000_500,
    segment_size_in_bytes=4096,
    segment_leader_epochs={3: 150, 1: 100},  # written by epoch: 1 first
    state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
    custom_metadata=b"\xca\xfe",
)
SEGMENT_METADATA_GOLDEN = _hex(
    "010000",  # frame version 1, api key 0, version 0
    SEGMENT_ID_ENTRY_HEX,
    "0000000000000064",  # StartOffset 100
    "00000000000000c7",  # EndOffset 199
    "00000002",  # BrokerId 2
    "0000018bcfe56800",  # MaxTimestampMs 1700000000000
    "0000018bcfe569f4",  # EventTimestampMs 1700000000500
    "03",  # SegmentLeaderEpochs: uvarint(2 + 1)
    "00000001000000000000006400",  # epoch 1 from 100, tags
    "00000003000000000000009600",  # epoch 3 from 150, tags
    "00001000",  # SegmentSizeInBytes 4096
    "03cafe",  # CustomMetadata: uvarint(2 + 1), bytes
    "00",  # RemoteLogSegmentState COPY_SEGMENT_STARTED
    "00",  # tagged fields
)

UPDATE = RemoteLogSegmentMetadataUpdate(
    SEGMENT,
    event_timestamp_ms=1_700_000_000_500,
    state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    broker_id=2,
)
UPDATE_GOLDEN = _hex(
    "010100",  # frame version 1, api key 1, version 0
    SEGMENT_ID_ENTRY_HEX,
    "00000002",  # BrokerId
    "0000018bcfe569f4",  # EventTimestampMs
    "00",  # CustomMetadata null
    "01",  # RemoteLogSegmentState COPY_SEGMENT_FINISHED
    "00",  # tagged fields
)

DELETE = RemotePartitionDeleteMetadata(
    TP, RemotePartitionDeleteState.DELETE_PARTITION_STARTED, 1_700_000_000_500, 1
)
DELETE_GOLDEN = _hex(
    "010200",  # frame version 1, api key 2, version 0
    TOPIC_ID_PARTITION_HEX,
    "00000001",  # BrokerId
    "0000018bcfe569f4",  # EventTimestampMs
    "01",  # RemotePartitionDeleteState DELETE_PARTITION_STARTED
    "00",  # tagged fields
)

SNAPSHOT = RemoteLogSegmentMetadataSnapshot(
    SEGMENT_ID,
    start_offset=0,
    end_offset=9,
    max_timestamp_ms=-1,
    broker_id=0,
    event_timestamp_ms=1,
    segment_size_in_bytes=70,
    segment_leader_epochs={0: 0},
    state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
    custom_metadata=None,
)
SNAPSHOT_GOLDEN = _hex(
    "010300",  # frame version 1, api key 3, version 0
    SEGMENT_ID_HEX,  # SegmentId
    "0000000000000000",  # StartOffset
    "0000000000000009",  # EndOffset
    "00000000",  # BrokerId
    "ffffffffffffffff",  # MaxTimestampMs -1
    "0000000000000001",  # EventTimestampMs
    "0200000000000000000000000000",  # one leader epoch entry: 0 from 0
    "00000046",  # SegmentSizeInBytes 70
    "00",  # CustomMetadata null
    "02",  # DELETE_SEGMENT_STARTED
    "00",  # tagged fields
)

# KIP-1058: TxnIndexEmpty is tagged field 0 of records 0 and 3, written only when true.
TXN_INDEX_EMPTY_TAG_HEX = "01000101"  # one tagged field: tag 0, size 1, true

GOLDEN = [
    (SEGMENT_METADATA, SEGMENT_METADATA_GOLDEN),
    (
        replace(SEGMENT_METADATA, txn_idx_empty=True),
        SEGMENT_METADATA_GOLDEN[:-1] + bytes.fromhex(TXN_INDEX_EMPTY_TAG_HEX),
    ),
    (
        replace(SNAPSHOT, txn_idx_empty=True),
        SNAPSHOT_GOLDEN[:-1] + bytes.fromhex(TXN_INDEX_EMPTY_TAG_HEX),
    ),
    (UPDATE, UPDATE_GOLDEN),
    (DELETE, DELETE_GOLDEN),
    (SNAPSHOT, SNAPSHOT_GOLDEN),
]


@pytest.mark.parametrize(("metadata", "golden"), GOLDEN)
def test_serialize_writes_kafkas_bytes(metadata: object, golden: bytes) -> None:
    assert serialize(metadata) == golden  # type: ignore[arg-type]


@pytest.mark.parametrize(("metadata", "golden"), GOLDEN)
def test_deserialize_reads_kafkas_bytes(metadata: object, golden: bytes) -> None:
    assert deserialize(golden) == metadata


@pytest.mark.parametrize(
    "metadata",
    [
        RemoteLogSegmentMetadataUpdate(
            SEGMENT, 7, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, 9, b""
        ),
        RemotePartitionDeleteMetadata(
            TopicIdPartition(uuid.uuid4(), TopicPartition("é" * 300, 2**31 - 1)),
            RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
            -1,
            -1,
        ),
        RemoteLogSegmentMetadata(
            SEGMENT, 0, 2**62, 2**62, 1, 2, 2**31 - 1, {i: i * 10 for i in range(200)}
        ),
    ],
)
def test_round_trips(metadata: object) -> None:
    assert deserialize(serialize(metadata)) == metadata  # type: ignore[arg-type]


def test_unknown_tagged_fields_are_skipped() -> None:
    # A newer Kafka may add tagged fields: tag 5 of 2 bytes in the message's section.
    value = DELETE_GOLDEN[:-1] + bytes.fromhex("010502abcd")
    assert deserialize(value) == DELETE


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "record ends early"),
        (b"\x00\x02\x00", "frame version"),
        (b"\x02\x02\x00", "frame version"),
        (b"\x01\x09\x00", "unknown record type"),
        (b"\x01\x02\x01", "unsupported version"),
        (DELETE_GOLDEN[:-4], "record ends early"),
        (DELETE_GOLDEN + b"\x00", "after the record"),
        (DELETE_GOLDEN[:-2] + b"\x07\x00", "record type 2"),  # delete state 7
        (UPDATE_GOLDEN[:-2] + b"\x00\x00", "record type 1"),  # update to STARTED
        (SEGMENT_METADATA_GOLDEN[:-2] + b"\x09\x00", "record type 0"),  # state 9
        (b"\x01\x00\x00\xff\xff\xff\xff\xff\xff", "varint"),
        (SEGMENT_METADATA_GOLDEN[:-1] + bytes.fromhex("0100020101"), "tagged value"),
    ],
)
def test_bad_bytes_raise_a_message_format_error(value: bytes, reason: str) -> None:
    with pytest.raises(MessageFormatError, match=reason):
        deserialize(value)


def test_a_segment_with_bad_offsets_is_a_format_error() -> None:
    # EndOffset below StartOffset: the record breaks RemoteLogSegmentMetadata's invariant.
    bad = SEGMENT_METADATA_GOLDEN.replace(bytes.fromhex("00000000000000c7"), bytes(8), 1)
    with pytest.raises(MessageFormatError, match="bad offsets"):
        deserialize(bad)
