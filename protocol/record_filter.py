"""Log compaction's view of a RecordBatch v2: each record's key and offset, and the batch
rebuilt with a subset of its records (Kafka's MemoryRecords.filterTo with the
MemoryRecordsBuilder it uses for the retained records, and DefaultRecordBatch's empty
header).

Byte layout: batches as in protocol.record_batch, records as in protocol.records. A
record is split where the rebuild needs it:

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint | body
    body = keyLength varint | key | valueLength varint | value | headersCount | headers

The body is copied unchanged; length, attributes (written as 0, as Kafka's builder does)
and timestampDelta are re-encoded; offsetDelta is kept, so the deltas of a rebuilt batch
may have gaps.

A rebuilt batch keeps baseOffset and lastOffsetDelta (so the offsets after it and the
producer's last sequence stay right), partitionLeaderEpoch, producerId, producerEpoch,
baseSequence, the codec (the records are compressed again), the timestamp type and the
transactional and control flags; recordsCount counts the retained records. baseTimestamp
is the first retained record's timestamp, or the delete horizon when one is given: then
attribute bit 6 says so (KIP-534) and the deltas are taken from the horizon. maxTimestamp
is the largest retained timestamp (CreateTime) or stays the batch's append time
(LogAppendTime, which is also every record's timestamp). An empty batch keeps the
offsets, producer fields, epoch, flags and maxTimestamp with no records, no codec and
baseTimestamp -1.

Pure functions of their arguments; any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

import crc32c

from tiercel.protocol.compression import CompressionType, compress
from tiercel.protocol.errors import InvalidRecordError
from tiercel.protocol.record_batch import (
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    ReadableBuffer,
    RecordBatchHeader,
    TimestampType,
    compute_attributes,
)
from tiercel.protocol.records import decode_varint, decode_varlong, encode_varint, encode_varlong

__all__ = [
    "ScannedRecord",
    "empty_batch",
    "rebuild_batch",
    "record_timestamp",
    "scan_records",
]

_PREFIX: Final = struct.Struct(">qiibI")
_CRC_COVERED_HEADER: Final = struct.Struct(">hiqqqhii")
_INVALID: Final = "Found invalid record structure"


class ScannedRecord(NamedTuple):
    """One record of an uncompressed records section, as compaction needs it.

    ``body_start`` and ``end`` delimit the body (key onwards) in the section scanned;
    ``has_value`` is False for a tombstone. A plain value; thread-safe.
    """

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    has_value: bool
    body_start: int
    end: int


def scan_records(data: ReadableBuffer, count: int) -> list[ScannedRecord]:  # noqa: C901
    """The ``count`` records of an uncompressed records section, in order.

    Raises InvalidRecordError when a record's fields do not fit its declared length, a
    key or value length is below -1, or the section does not hold exactly ``count``
    records. Header contents are not parsed: the body is copied as it is.
    """
    if count < 0:
        raise InvalidRecordError(f"Found invalid record count {count} in magic v2 batch")
    size = len(data)
    out: list[ScannedRecord] = []
    append = out.append
    pos = 0
    try:
        for _ in range(count):
            # One-byte varints (and two-byte record lengths) are decoded inline: this
            # loop runs for every record compaction reads, and calls cost a third.
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = decode_varint(data, pos)
            end = pos + length
            if length <= 0 or end > size:
                raise InvalidRecordError(f"{_INVALID}: record size {length}")
            b = data[pos + 1]
            if b < 0x80:
                timestamp_delta = (b >> 1) ^ -(b & 1)
                p = pos + 2
            else:
                timestamp_delta, p = decode_varlong(data, pos + 1)
            b = data[p]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                body_start = p + 1
            else:
                offset_delta, body_start = decode_varint(data, p)
            b = data[body_start]
            if b < 0x80:
                key_length = (b >> 1) ^ -(b & 1)
                p = body_start + 1
            else:
                key_length, p = decode_varint(data, body_start)
            if key_length == -1:
                key = None
            elif 0 <= key_length <= end - p:
                key = bytes(data[p : p + key_length])
                p += key_length
            else:
                raise InvalidRecordError(f"{_INVALID}: key size {key_length}")
            b = data[p]
            if b < 0x80:
                value_length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                value_length, p = decode_varint(data, p)
            if value_length < -1 or p + value_length > end:
                raise InvalidRecordError(f"{_INVALID}: value size {value_length}")
            append(
                ScannedRecord(
                    offset_delta, timestamp_delta, key, value_length >= 0, body_start, end
                )
            )
            pos = end
    except IndexError:
        raise InvalidRecordError("Incorrect declared batch size, premature EOF reached") from None
    if pos != size:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
    return out


def record_timestamp(header: RecordBatchHeader, record: ScannedRecord) -> int:
    """The record's timestamp as consumers see it."""
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        return header.max_timestamp
    return header.base_timestamp + record.timestamp_delta


def rebuild_batch(
    header: RecordBatchHeader,
    data: ReadableBuffer,
    retained: Sequence[ScannedRecord],
    delete_horizon_ms: int = NO_TIMESTAMP,
) -> bytes:
    """The batch ``header`` describes holding only ``retained`` (records scanned from its
    uncompressed section ``data``, in order, at least one); ``delete_horizon_ms`` >= 0
    sets the delete horizon (see the module docstring)."""
    stamps = [record_timestamp(header, record) for record in retained]
    has_horizon = delete_horizon_ms >= 0
    base_timestamp = delete_horizon_ms if has_horizon else stamps[0]
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(NO_TIMESTAMP, *stamps)
    view = memoryview(data)
    body = bytearray()
    for record, timestamp in zip(retained, stamps, strict=True):
        head = b"\x00" + encode_varlong(timestamp - base_timestamp)
        head += encode_varint(record.offset_delta)
        body += encode_varint(len(head) + record.end - record.body_start)
        body += head
        body += view[record.body_start : record.end]
    codec = header.compression
    payload = compress(codec, body) if codec != CompressionType.NONE else bytes(body)
    attributes = compute_attributes(
        codec,
        header.timestamp_type,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        has_delete_horizon=has_horizon,
    )
    return _assemble(header, attributes, base_timestamp, max_timestamp, len(retained), payload)


def empty_batch(header: RecordBatchHeader) -> bytes:
    """The header of the batch with no records: kept where a producer's last sequence
    and epoch must survive compaction (Kafka's DefaultRecordBatch.writeEmptyHeader)."""
    attributes = compute_attributes(
        CompressionType.NONE,
        header.timestamp_type,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
    )
    return _assemble(header, attributes, NO_TIMESTAMP, header.max_timestamp, 0, b"")


def _assemble(
    header: RecordBatchHeader,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    count: int,
    payload: bytes,
) -> bytes:
    covered = _CRC_COVERED_HEADER.pack(
        attributes,
        header.last_offset_delta,
        base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    crc = crc32c.crc32c(payload, crc32c.crc32c(covered))
    prefix = _PREFIX.pack(
        header.base_offset,
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload),
        header.partition_leader_epoch,
        MAGIC_V2,
        crc,
    )
    return b"".join((prefix, covered, payload))
