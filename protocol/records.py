"""Records inside a RecordBatch v2: varints, decoding and the produce-path validator.

Byte layout of one record (Kafka's DefaultRecord; every length is a zigzag varint):

    Record =>
      length          varint    bytes after this field, up to the end of the record
      attributes      int8      unused, written as 0
      timestampDelta  varlong   timestamp - batch.baseTimestamp
      offsetDelta     varint    offset - batch.baseOffset (0, 1, 2, ... in batch order)
      keyLength       varint    -1 = null key
      key             bytes
      valueLength     varint    -1 = null value
      value           bytes
      headersCount    varint
      Header =>       (headersCount times)
        headerKeyLength    varint   never negative: header keys are non-null strings
        headerKey          UTF-8
        headerValueLength  varint   -1 = null value
        headerValue        bytes

A varint holds 32 bits in at most 5 bytes and a varlong 64 bits in at most 10 bytes
(little-endian base-128 groups, high bit = "more follows"). As in Kafka's ByteUtils, bits
beyond the 32nd (64th) in the last group are dropped, and a longer encoding is an error.

Kafka treats any negative key or value length as null; Tiercel accepts only -1 there
because clients (librdkafka among them) cannot parse the others, so such a record would
poison every consumer of the partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiercel.protocol.errors import InvalidRecordError
from tiercel.protocol.record_batch import ReadableBuffer

__all__ = [
    "Record",
    "RecordsSummary",
    "decode_records",
    "decode_varint",
    "decode_varlong",
    "encode_varint",
    "encode_varlong",
    "size_of_varint",
    "size_of_varlong",
    "validate_records",
]

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INVALID_STRUCTURE = "Found invalid record structure"


# --- varints -------------------------------------------------------------------------


def encode_varint(value: int) -> bytes:
    """Zigzag varint of a 32-bit signed int (Kafka's ByteUtils.writeVarint)."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Zigzag varlong of a 64-bit signed int (Kafka's ByteUtils.writeVarlong)."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _encode_unsigned(raw: int) -> bytes:
    if raw < 0x80:
        return bytes((raw,))
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def size_of_varint(value: int) -> int:
    """Encoded size in bytes of `encode_varint(value)`."""
    return _size_of_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def size_of_varlong(value: int) -> int:
    """Encoded size in bytes of `encode_varlong(value)`."""
    return _size_of_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _size_of_unsigned(raw: int) -> int:
    return max(1, (raw.bit_length() + 6) // 7)


def decode_varint(buf: ReadableBuffer, pos: int) -> tuple[int, int]:
    """Read a zigzag varint at `pos`; returns (value, position after it).

    Raises InvalidRecordError when the buffer ends inside the varint or it is longer
    than 5 bytes.
    """
    try:
        return _read_varint(buf, pos)
    except IndexError:
        raise InvalidRecordError(f"{_INVALID_STRUCTURE}: varint truncated") from None


def decode_varlong(buf: ReadableBuffer, pos: int) -> tuple[int, int]:
    """Read a zigzag varlong at `pos`; returns (value, position after it).

    Raises InvalidRecordError when the buffer ends inside the varlong or it is longer
    than 10 bytes.
    """
    try:
        return _read_varlong(buf, pos)
    except IndexError:
        raise InvalidRecordError(f"{_INVALID_STRUCTURE}: varlong truncated") from None


def _read_varint(buf: ReadableBuffer, pos: int) -> tuple[int, int]:
    # IndexError at the end of `buf` is left to the caller, which owns the message.
    raw = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= 0xFFFFFFFF
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 28:
            raise InvalidRecordError(f"{_INVALID_STRUCTURE}: varint is too long")


def _read_varlong(buf: ReadableBuffer, pos: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= 0xFFFFFFFFFFFFFFFF
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidRecordError(f"{_INVALID_STRUCTURE}: varlong is too long")


# --- produce-path validation ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordsSummary:
    """What the produce path needs from a structurally valid run of records.

    Invariants: `min_timestamp_delta <= max_timestamp_delta`; `offset_delta_of_max_timestamp`
    is the offset delta of the first record carrying `max_timestamp_delta`;
    `null_key_indexes` lists the indexes (= offset deltas) of the records whose key is
    null, in order, for the compacted-topic check. Thread-safe value.
    """

    count: int
    max_timestamp_delta: int
    offset_delta_of_max_timestamp: int
    min_timestamp_delta: int
    null_key_indexes: tuple[int, ...]


def validate_records(data: ReadableBuffer, count: int, pos: int = 0) -> RecordsSummary:
    """Walk `count` records in `data[pos:]` and check their structure, without copying.

    Raises InvalidRecordError when a varint is malformed, a record's fields do not fill
    exactly its declared length, a key/value/header-value length is below -1, a header
    key length is negative, the offset deltas are not 0..count-1 in order, the data ends
    before `count` records, or bytes remain after the last one. Pure CPU; any thread.
    """
    if count <= 0:
        raise InvalidRecordError(f"Invalid reported count for record batch: {count}")
    try:
        return _walk_records(data, count, pos)
    except IndexError:
        raise InvalidRecordError("Incorrect declared batch size, premature EOF reached") from None


def _walk_records(data: ReadableBuffer, count: int, p: int) -> RecordsSummary:  # noqa: C901
    # The produce hot path of a Python broker, hence one flat loop: one- and two-byte
    # varints (lengths < 8 KiB, deltas < 8192) are decoded inline, longer ones by the
    # helpers, and nothing is allocated per record. Bounds are not checked field by
    # field: reading past the end of `data` raises IndexError (the caller reports
    # premature EOF), and any other overrun, negative or short length ends the record
    # somewhere other than `record_end` (positions only grow), caught once per record.
    read_varint = _read_varint
    read_varlong = _read_varlong
    max_delta = _INT64_MIN
    min_delta = _INT64_MAX
    twice_offset_of_max = 0
    null_keys: list[int] | None = None
    # offset deltas are compared in zigzag form: 2 * expected for a valid record
    for twice_expected in range(0, count << 1, 2):
        # length
        b = data[p]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            b2 = data[p + 1]
            if b2 < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                length = (raw >> 1) ^ -(raw & 1)
                p += 2
            else:
                length, p = read_varint(data, p)
        record_end = p + length
        # attributes (1 byte, unused), timestampDelta
        b = data[p + 1]
        if b < 0x80:
            delta = (b >> 1) ^ -(b & 1)
            p += 2
        else:
            b2 = data[p + 2]
            if b2 < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                delta = (raw >> 1) ^ -(raw & 1)
                p += 3
            else:
                delta, p = read_varlong(data, p + 1)
        if delta > max_delta:
            max_delta = delta
            twice_offset_of_max = twice_expected
        if delta < min_delta:
            min_delta = delta
        # offsetDelta
        b = data[p]
        if b < 0x80:
            raw = b
            p += 1
        else:
            b2 = data[p + 1]
            if b2 < 0x80:
                raw = (b & 0x7F) | (b2 << 7)
                p += 2
            else:
                raw, p = read_varint(data, p)
                raw = ((raw << 1) ^ (raw >> 31)) & 0xFFFFFFFF
        if raw != twice_expected:
            raise _offset_delta_error(raw, twice_expected >> 1)
        # keyLength, key
        b = data[p]
        if b == 1:
            if null_keys is None:
                null_keys = []
            null_keys.append(twice_expected >> 1)
            p += 1
        elif b < 0x80 and not b & 1:
            p += 1 + (b >> 1)
        else:
            size, p = read_varint(data, p)
            if size < 0:
                raise InvalidRecordError(f"{_INVALID_STRUCTURE}: key size {size}")
            p += size
        # valueLength, value
        b = data[p]
        if b < 0x80 and (b == 1 or not b & 1):
            p += 1 + (b >> 1)
        else:
            b2 = data[p + 1]
            if b < 0x80 or b2 >= 0x80 or b & 1:
                size, p = read_varint(data, p)
                if size < -1:
                    raise InvalidRecordError(f"{_INVALID_STRUCTURE}: value size {size}")
                if size > 0:
                    p += size
            else:
                p += 2 + (((b & 0x7F) | (b2 << 7)) >> 1)
        # headersCount, headers
        n = data[p]
        if n:
            if n < 0x80 and not n & 1:
                n >>= 1
                p += 1
            else:
                n, p = read_varint(data, p)
                if n < 0:
                    raise InvalidRecordError(f"Found invalid number of record headers {n}")
            if n > record_end - p:
                raise InvalidRecordError(
                    f"Found invalid number of record headers. {n} is larger than the "
                    "remaining size of the buffer"
                )
            for _ in range(n):
                b = data[p]
                if b < 0x80 and not b & 1:
                    p += 1 + (b >> 1)
                else:
                    size, p = read_varint(data, p)
                    if size < 0:
                        raise InvalidRecordError(f"Invalid negative header key size {size}")
                    p += size
                b = data[p]
                if b < 0x80 and (b == 1 or not b & 1):
                    p += 1 + (b >> 1)
                else:
                    size, p = read_varint(data, p)
                    if size < -1:
                        raise InvalidRecordError(f"{_INVALID_STRUCTURE}: header value size {size}")
                    if size > 0:
                        p += size
        else:
            p += 1
        if p != record_end:
            raise _record_size_error(length, record_end, p, len(data))
    if p != len(data):
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
    null_key_indexes = () if null_keys is None else tuple(null_keys)
    return RecordsSummary(count, max_delta, twice_offset_of_max >> 1, min_delta, null_key_indexes)


def _offset_delta_error(raw: int, expected: int) -> InvalidRecordError:
    actual = (raw >> 1) ^ -(raw & 1)
    return InvalidRecordError(
        f"Invalid offset delta {actual} for record {expected} of the batch: expected {expected}"
    )


def _record_size_error(length: int, record_end: int, p: int, end: int) -> InvalidRecordError:
    start = record_end - length
    if length <= 0 or record_end > end:
        return InvalidRecordError(
            f"Invalid record size: expected {length} bytes in record payload, but instead "
            f"the buffer has only {end - start} remaining bytes."
        )
    return InvalidRecordError(
        f"Invalid record size: expected to read {length} bytes in record payload, but "
        f"instead read {p - start}"
    )


# --- decoding -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record; offsets and timestamps are deltas against its batch header.

    Invariants: header keys are str (decoded as UTF-8, malformed bytes replaced as Java's
    String constructor does); `attributes` is the unused attributes byte as stored.
    Thread-safe value.
    """

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    attributes: int = 0


def decode_records(data: ReadableBuffer, count: int, pos: int = 0) -> list[Record]:
    """Decode `count` records from `data[pos:]` (an uncompressed records section).

    Applies the same structural rules as `validate_records` except the offset-delta
    sequence, which it reports as stored. Raises InvalidRecordError. For tests, ListOffsets
    timestamp lookup and compaction; the produce path uses `validate_records`.
    """
    if count < 0:
        raise InvalidRecordError(f"Found invalid record count {count} in magic v2 batch")
    end = len(data)
    records: list[Record] = []
    try:
        for _ in range(count):
            record, pos = _decode_record(data, pos, end)
            records.append(record)
    except IndexError:
        raise InvalidRecordError("Incorrect declared batch size, premature EOF reached") from None
    if pos != end:
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
    return records


def _decode_record(data: ReadableBuffer, pos: int, end: int) -> tuple[Record, int]:
    length, pos = _read_varint(data, pos)
    start = pos
    record_end = pos + length
    if length <= 0 or record_end > end:
        raise InvalidRecordError(
            f"Invalid record size: expected {length} bytes in record payload, but instead "
            f"the buffer has only {end - pos} remaining bytes."
        )
    attributes = data[pos]
    timestamp_delta, pos = _read_varlong(data, pos + 1)
    offset_delta, pos = _read_varint(data, pos)
    key, pos = _read_bytes(data, pos, record_end, "key")
    value, pos = _read_bytes(data, pos, record_end, "value")
    n_headers, pos = _read_varint(data, pos)
    if n_headers < 0:
        raise InvalidRecordError(f"Found invalid number of record headers {n_headers}")
    if n_headers > record_end - pos:
        raise InvalidRecordError(
            f"Found invalid number of record headers. {n_headers} is larger than the "
            "remaining size of the buffer"
        )
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(n_headers):
        key_size, pos = _read_varint(data, pos)
        if key_size < 0:
            raise InvalidRecordError(f"Invalid negative header key size {key_size}")
        if pos + key_size > record_end:
            raise InvalidRecordError(f"{_INVALID_STRUCTURE}: header key size {key_size}")
        header_key = bytes(data[pos : pos + key_size]).decode("utf-8", "replace")
        pos += key_size
        header_value, pos = _read_bytes(data, pos, record_end, "header value")
        headers.append((header_key, header_value))
    if pos != record_end:
        raise InvalidRecordError(
            f"Invalid record size: expected to read {length} bytes in record payload, but "
            f"instead read {pos - start}"
        )
    signed_attributes = attributes - 256 if attributes > 127 else attributes
    record = Record(offset_delta, timestamp_delta, key, value, tuple(headers), signed_attributes)
    return record, pos


def _read_bytes(
    data: ReadableBuffer, pos: int, record_end: int, what: str
) -> tuple[bytes | None, int]:
    size, pos = _read_varint(data, pos)
    if size == -1:
        return None, pos
    if size < 0 or pos + size > record_end:
        raise InvalidRecordError(f"{_INVALID_STRUCTURE}: {what} size {size}")
    return bytes(data[pos : pos + size]), pos + size
