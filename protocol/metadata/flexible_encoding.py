"""The primitives of Kafka's flexible message encoding, as the metadata records use them.

Every metadata record is flexible in all its versions ("flexibleVersions": "0+" in each
of Kafka's metadata/src/main/resources/common/metadata/*.json), so this is the only
encoding here (Kafka's ByteBufferAccessor and ByteUtils read and write the same bytes):

    int8 int16 int32 int64   1, 2, 4, 8 bytes, big-endian two's complement
    uint16                   2 bytes, big-endian
    bool                     1 byte: 0 is false, anything else true; written 0 or 1
    float64                  8 bytes, IEEE 754, big-endian
    uuid                     16 bytes, the most significant half first
    uvarint                  7 bits a byte, least significant group first, the high bit
                             set on every byte but the last; at most 5 bytes (32 bits)
    compact string           uvarint(length + 1), then the UTF-8 bytes; 0 is null; a
                             string has at most 32767 bytes
    compact bytes            uvarint(length + 1), then the bytes; 0 is null
    compact array            uvarint(count + 1), then the elements; 0 is null

Readers take the buffer and a position and return the value with the position after it;
writers append to a bytearray. A reader that runs out of bytes or meets a value the
encoding forbids raises `MetadataParseError` (Kafka's MetadataParseException), never
anything else, so that a corrupt record cannot crash whoever replays the log. Pure; any
thread.
"""

from __future__ import annotations

import uuid
from typing import Final

from tiercel.protocol.message_codec import MessageFormatError

__all__ = [
    "MAX_STRING_BYTES",
    "MetadataParseError",
    "read_compact_length",
    "read_utf8",
    "read_uvarint",
    "uuid_of",
    "write_compact_length",
    "write_uvarint",
]

MAX_STRING_BYTES: Final = 0x7FFF
_UUID_SIZE: Final = 16
# A log names the same topic ids and directory ids over and over, and building a
# uuid.UUID costs more than the rest of a small record's decoding: decoded ids are
# memoized (the memo is dropped whole when full, so it stays bounded).
_UUID_MEMO_LIMIT: Final = 1 << 16
_uuid_memo: dict[bytes, uuid.UUID] = {}


class MetadataParseError(MessageFormatError):
    """Bytes that are not a valid metadata record (Kafka's MetadataParseException)."""


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's ByteUtils.readUnsignedVarint)."""
    try:
        byte = buf[pos]
        if byte < 0x80:
            return byte, pos + 1
        value = byte & 0x7F
        for shift in (7, 14, 21, 28):
            pos += 1
            byte = buf[pos]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos + 1
    except IndexError:
        raise MetadataParseError(f"record ends inside a varint at {pos}") from None
    raise MetadataParseError(f"varint longer than 5 bytes at {pos}")


def write_uvarint(out: bytearray, value: int) -> None:
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"{value} does not fit an unsigned varint")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_compact_length(buf: bytes | memoryview, pos: int, unit: int) -> tuple[int, int]:
    """The length (or count) of a compact string, bytes or array, -1 for null, checked
    against what is left of ``buf``: ``unit`` bytes at least per byte (or element), as
    Kafka's readers refuse a collection larger than the bytes remaining."""
    try:
        encoded = buf[pos]
    except IndexError:
        raise MetadataParseError(f"record ends at {pos}, before a length") from None
    if encoded < 0x80:
        pos += 1
    else:
        encoded, pos = read_uvarint(buf, pos)
    length = encoded - 1
    if length * unit > len(buf) - pos:
        raise MetadataParseError(
            f"length {length} at {pos} is larger than the {len(buf) - pos} bytes left"
        )
    return length, pos


def write_compact_length(out: bytearray, length: int) -> None:
    write_uvarint(out, length + 1)


def uuid_of(raw: bytes) -> uuid.UUID:
    """The uuid of 16 bytes (fewer: the record ended inside it)."""
    value = _uuid_memo.get(raw)
    if value is None:
        if len(raw) != _UUID_SIZE:
            raise MetadataParseError("record ends inside a uuid")
        if len(_uuid_memo) >= _UUID_MEMO_LIMIT:
            _uuid_memo.clear()
        value = _uuid_memo[raw] = uuid.UUID(bytes=raw)
    return value


def read_utf8(buf: bytes | memoryview, pos: int, end: int, field: str) -> str:
    try:
        return str(buf[pos:end], "utf-8")
    except UnicodeDecodeError as e:
        raise MetadataParseError(f"field {field} is not UTF-8: {e}") from None
