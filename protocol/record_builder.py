"""Build RecordBatch v2 bytes the way Kafka's MemoryRecordsBuilder does.

Output layout: the 61-byte header of protocol.record_batch followed by the records of
protocol.records (offset deltas 0..n-1), compressed as one blob when a codec is given.
baseTimestamp is the first record's timestamp, maxTimestamp the largest one (or the
log-append time), lastOffsetDelta n-1, and the CRC-32C covers attributes..end.
For tests now and for internal topics (__consumer_offsets, ...) later.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import crc32c

from tiercel.protocol.compression import CompressionType, compress
from tiercel.protocol.record_batch import (
    COMPRESSION_CODEC_MASK,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    ReadableBuffer,
    RecordBatchHeader,
    TimestampType,
    compute_attributes,
)
from tiercel.protocol.records import encode_varint, encode_varlong

__all__ = ["SimpleRecord", "build_record_batch"]

_PREFIX = struct.Struct(">qiibI")
_CRC_COVERED_HEADER = struct.Struct(">hiqqqhii")
_NULL_LENGTH = encode_varint(-1)


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """A record to append: key, value, headers and an optional create time.

    Invariants: `timestamp` None means NO_TIMESTAMP (-1), as Kafka's SimpleRecord(key,
    value); header keys are non-null strings. Thread-safe value.
    """

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int | None = None


def build_record_batch(
    records: Iterable[SimpleRecord],
    *,
    base_offset: int = 0,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    base_timestamp: int | None = None,
    log_append_time: int | None = None,
) -> bytes:
    """One complete batch holding `records` at offsets base_offset .. base_offset+n-1.

    `base_timestamp` overrides the first record's timestamp as the delta base;
    `log_append_time` is required with LOG_APPEND_TIME and becomes maxTimestamp. Raises
    ValueError for what MemoryRecordsBuilder rejects (no records, a negative timestamp
    other than -1, a producer id without epoch or sequence, transactions without a
    producer id).
    """
    batch = list(records)
    if not batch:
        raise ValueError("a record batch needs at least one record")
    _check_producer_state(producer_id, producer_epoch, base_sequence, is_transactional, is_control)
    timestamps = [NO_TIMESTAMP if r.timestamp is None else r.timestamp for r in batch]
    base = timestamps[0] if base_timestamp is None else base_timestamp
    for timestamp in (*timestamps, base):
        if timestamp < 0 and timestamp != NO_TIMESTAMP:
            raise ValueError(f"Invalid negative timestamp {timestamp}")
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("LOG_APPEND_TIME batches need log_append_time")
        max_timestamp = log_append_time
    else:
        max_timestamp = max(timestamps)

    body = bytearray()
    for offset_delta, (record, timestamp) in enumerate(zip(batch, timestamps, strict=True)):
        body += _encode_record(offset_delta, timestamp - base, record)
    payload = compress(compression, body) if compression != CompressionType.NONE else body

    attributes = compute_attributes(
        compression, timestamp_type, is_transactional=is_transactional, is_control=is_control
    )
    covered_header = _CRC_COVERED_HEADER.pack(
        attributes,
        len(batch) - 1,
        base,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(batch),
    )
    crc = crc32c.crc32c(payload, crc32c.crc32c(covered_header))
    batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload)
    prefix = _PREFIX.pack(base_offset, batch_length, partition_leader_epoch, MAGIC_V2, crc)
    return b"".join((prefix, covered_header, payload))


def _check_producer_state(
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool,
    is_control: bool,
) -> None:
    if is_transactional and producer_id == NO_PRODUCER_ID:
        raise ValueError("Cannot write transactional messages without a valid producer ID")
    if producer_id != NO_PRODUCER_ID:
        if producer_epoch == NO_PRODUCER_EPOCH:
            raise ValueError("Invalid negative producer epoch")
        if base_sequence < 0 and not is_control:
            raise ValueError("Invalid negative sequence number used")


def _encode_record(offset_delta: int, timestamp_delta: int, record: SimpleRecord) -> bytes:
    body = bytearray(b"\x00")  # attributes: unused
    body += encode_varlong(timestamp_delta)
    body += encode_varint(offset_delta)
    _append_nullable(body, record.key)
    _append_nullable(body, record.value)
    body += encode_varint(len(record.headers))
    for key, value in record.headers:
        encoded_key = key.encode()
        body += encode_varint(len(encoded_key))
        body += encoded_key
        _append_nullable(body, value)
    return encode_varint(len(body)) + body


def _append_nullable(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _NULL_LENGTH
    else:
        out += encode_varint(len(data))
        out += data


def recompress_batch(
    header: RecordBatchHeader, records: ReadableBuffer, codec: CompressionType
) -> bytes:
    """The batch described by ``header`` with its (uncompressed) ``records`` section
    compressed with ``codec`` instead: what a broker stores for a topic whose
    compression.type differs from the producer's. Offsets, timestamps, producer state
    and flags are kept; the CRC is recomputed. The records are not decoded: the
    uncompressed records section is the same whatever the codec."""
    payload = compress(codec, records) if codec != CompressionType.NONE else bytes(records)
    attributes = (header.attributes & ~COMPRESSION_CODEC_MASK) | codec
    covered_header = _CRC_COVERED_HEADER.pack(
        attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.records_count,
    )
    crc = crc32c.crc32c(payload, crc32c.crc32c(covered_header))
    batch_length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload)
    prefix = _PREFIX.pack(
        header.base_offset, batch_length, header.partition_leader_epoch, MAGIC_V2, crc
    )
    return b"".join((prefix, covered_header, payload))
