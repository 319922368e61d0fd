"""The key and value schemas of __transaction_state records, byte for byte as Kafka's
(TransactionLogKey / TransactionLogValue in Kafka's transaction-coordinator module,
written by ``TransactionLog.keyToBytes`` / ``valueToBytes``).

Both start with an int16 version; big-endian; a STRING is an int16 length and UTF-8.

    key version 0
        transactional_id string
    value version 0 (what Kafka 4 writes without transaction version 2, and Tiercel)
        producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
        transaction_status int8, transaction_partitions nullable array of
            topic string, partition_ids array of int32,
        transaction_last_update_timestamp_ms int64, transaction_start_timestamp_ms int64
    value version 1 — the same fields in the flexible encoding (compact strings and
        arrays with varint length + 1, tagged fields after each struct), and tagged
        fields on the value: 0 previous_producer_id int64 (default -1),
        1 next_producer_id int64 (default -1), 2 client_transaction_version int16
        (default 0); a tagged field is written only when it is not its default.

An Empty transaction writes null partitions (Kafka requires it to have none); every other
state writes its partitions, grouped per topic (Tiercel sorts them: Kafka's order comes
from a hash set and carries no meaning). A key with a null value is a tombstone: the
transactional id expired.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.message_codec import (
    MessageFormatError,
    RecordReader,
    RecordWriter,
    record_version,
)
from tiercel.protocol.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from tiercel.server.coordinator.transaction.transaction_metadata import (
    TransactionState,
    TxnTransitMetadata,
)
from tiercel.storage.topic_partition import TopicPartition

__all__ = [
    "KEY_VERSION",
    "VALUE_VERSION",
    "MessageFormatError",
    "TransactionLogValue",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "value_from_transit",
]

KEY_VERSION: Final = 0
VALUE_VERSION: Final = 0
_MAX_VALUE_VERSION: Final = 1
_FLEXIBLE_VERSION: Final = 1
_TAG_PREVIOUS_PRODUCER_ID: Final = 0
_TAG_NEXT_PRODUCER_ID: Final = 1
_TAG_CLIENT_TRANSACTION_VERSION: Final = 2
_INT64: Final = struct.Struct(">q")
_INT16: Final = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """One TransactionLogValue. ``partitions`` None is the schema's null (Empty).
    Immutable; any thread."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: TransactionState
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    def topic_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(
            TopicPartition(topic, p) for topic, ids in self.partitions or () for p in ids
        )

    def to_transit(self) -> TxnTransitMetadata:
        """The metadata this record restores on load. The last producer epoch is not in
        the log: a loaded id has none (as in Kafka)."""
        return TxnTransitMetadata(
            self.producer_id,
            self.previous_producer_id,
            self.producer_epoch,
            NO_PRODUCER_EPOCH,
            self.transaction_timeout_ms,
            self.transaction_status,
            self.topic_partitions(),
            self.start_timestamp_ms,
            self.last_update_timestamp_ms,
        )


def value_from_transit(transit: TxnTransitMetadata) -> TransactionLogValue:
    if transit.txn_state == TransactionState.EMPTY and transit.topic_partitions:
        raise ValueError("an Empty transaction has no partitions")
    partitions = None
    if transit.txn_state != TransactionState.EMPTY:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in transit.topic_partitions:
            by_topic[tp.topic].append(tp.partition)
        partitions = tuple((t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items()))
    return TransactionLogValue(
        transit.producer_id,
        transit.producer_epoch,
        transit.txn_timeout_ms,
        transit.txn_state,
        partitions,
        transit.txn_last_update_timestamp,
        transit.txn_start_timestamp,
    )


def encode_key(transactional_id: str) -> bytes:
    writer = RecordWriter(KEY_VERSION, flexible=False)
    writer.string(transactional_id)
    return bytes(writer.out)


def decode_key(buf: bytes | memoryview) -> str | None:
    """The transactional id; None for a key version this broker does not know."""
    if record_version(buf) != KEY_VERSION:
        return None
    reader = RecordReader(buf, 2, flexible=False)
    transactional_id = reader.string()
    reader.end()
    return transactional_id


def encode_value(value: TransactionLogValue, version: int = VALUE_VERSION) -> bytes:
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise MessageFormatError(f"unknown transaction log value version {version}")
    flexible = version >= _FLEXIBLE_VERSION
    writer = RecordWriter(version, flexible=flexible)
    writer.int64(value.producer_id)
    writer.int16(value.producer_epoch)
    writer.int32(value.transaction_timeout_ms)
    writer.int8(int(value.transaction_status))
    if value.partitions is None:
        if flexible:
            writer.uvarint(0)
        else:
            writer.int32(-1)
    else:
        writer.array_length(len(value.partitions))
        for topic, ids in value.partitions:
            writer.string(topic)
            writer.int32_array(ids)
            writer.tagged_fields()
    writer.int64(value.last_update_timestamp_ms)
    writer.int64(value.start_timestamp_ms)
    if flexible:
        _write_value_tags(writer, value)
    return bytes(writer.out)


def _write_value_tags(writer: RecordWriter, value: TransactionLogValue) -> None:
    tags: list[tuple[int, bytes]] = []
    if value.previous_producer_id != NO_PRODUCER_ID:
        tags.append((_TAG_PREVIOUS_PRODUCER_ID, _INT64.pack(value.previous_producer_id)))
    if value.next_producer_id != NO_PRODUCER_ID:
        tags.append((_TAG_NEXT_PRODUCER_ID, _INT64.pack(value.next_producer_id)))
    if value.client_transaction_version != 0:
        tags.append(
            (_TAG_CLIENT_TRANSACTION_VERSION, _INT16.pack(value.client_transaction_version))
        )
    writer.tagged_fields(tags)


def decode_value(buf: bytes | memoryview) -> TransactionLogValue:
    version = record_version(buf)
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise MessageFormatError(f"unknown transaction log value version {version}")
    flexible = version >= _FLEXIBLE_VERSION
    reader = RecordReader(buf, 2, flexible=flexible)
    producer_id = reader.int64()
    producer_epoch = reader.int16()
    timeout_ms = reader.int32()
    status_id = reader.int8()
    try:
        status = TransactionState(status_id)
    except ValueError:
        raise MessageFormatError(f"unknown transaction status {status_id}") from None
    count = reader.uvarint() - 1 if flexible else reader.int32()
    partitions = None
    if count >= 0:
        entries = []
        for _ in range(count):
            topic = reader.string()
            ids = reader.int32_array()
            reader.tagged_fields()
            entries.append((topic, ids))
        partitions = tuple(entries)
    elif count != -1:
        raise MessageFormatError(f"invalid partition count {count}")
    last_update = reader.int64()
    start = reader.int64()
    previous, following, client_version = NO_PRODUCER_ID, NO_PRODUCER_ID, 0
    tags = reader.tagged_fields()
    if _TAG_PREVIOUS_PRODUCER_ID in tags:
        previous = reader.tagged_value(_INT64, tags[_TAG_PREVIOUS_PRODUCER_ID])[0]
    if _TAG_NEXT_PRODUCER_ID in tags:
        following = reader.tagged_value(_INT64, tags[_TAG_NEXT_PRODUCER_ID])[0]
    if _TAG_CLIENT_TRANSACTION_VERSION in tags:
        client_version = reader.tagged_value(_INT16, tags[_TAG_CLIENT_TRANSACTION_VERSION])[0]
    reader.end()
    return TransactionLogValue(
        producer_id,
        producer_epoch,
        timeout_ms,
        status,
        partitions,
        last_update,
        start,
        previous,
        following,
        client_version,
    )
