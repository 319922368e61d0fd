"""The primitive encoding of Kafka's generated messages, as the records of internal topics
use it: __consumer_offsets keys and values (each starting with an int16 version) and the
__remote_log_metadata values (whose header BytesApiMessageSerde writes as unsigned
varints, so their writer starts empty). Fields are big-endian. In the classic
("non-flexible") encoding a STRING is an int16 length and UTF-8 bytes (-1 = null where
nullable), BYTES an int32 length, an ARRAY an int32 count. In the "flexible" encoding
COMPACT_STRING / COMPACT_BYTES / COMPACT_ARRAY carry an unsigned varint of length + 1
(0 = null) and every struct ends with tagged fields: a varint count, then per field a
varint tag, a varint size and the bytes. A UUID is its 16 bytes (most significant
half first), as Kafka's Uuid is written.

    int8     1 byte       int16    2 bytes      int32    4 bytes      int64    8 bytes
    uuid     16 bytes     string   length + UTF-8        array    count + elements
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any, Final

__all__ = ["MessageFormatError", "RecordReader", "RecordWriter", "record_version"]

_INT8: Final = struct.Struct(">b")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_UUID_SIZE: Final = 16
_MAX_STRING_BYTES: Final = 0x7FFF


class MessageFormatError(ValueError):
    """A key or value that does not parse under its schema (corrupt or unknown version)."""


class RecordWriter:
    """Appends fields to ``out``, which starts with the int16 ``version`` unless it is
    None. Not thread-safe: one writer per record being encoded."""

    __slots__ = ("flexible", "out")

    def __init__(self, version: int | None, flexible: bool) -> None:
        self.out = bytearray() if version is None else bytearray(_INT16.pack(version))
        self.flexible = flexible

    def int8(self, value: int) -> None:
        self.out += _INT8.pack(value)

    def int16(self, value: int) -> None:
        self.out += _INT16.pack(value)

    def int32(self, value: int) -> None:
        self.out += _INT32.pack(value)

    def int64(self, value: int) -> None:
        self.out += _INT64.pack(value)

    def uuid(self, value: uuid.UUID) -> None:
        self.out += value.bytes

    def uvarint(self, value: int) -> None:
        while value >= 0x80:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def string(self, value: str | None) -> None:
        if value is None:
            if self.flexible:
                self.uvarint(0)
            else:
                self.out += _INT16.pack(-1)
            return
        encoded = value.encode()
        if len(encoded) > _MAX_STRING_BYTES:
            raise MessageFormatError(f"string of {len(encoded)} bytes is longer than 32767")
        if self.flexible:
            self.uvarint(len(encoded) + 1)
        else:
            self.out += _INT16.pack(len(encoded))
        self.out += encoded

    def bytes_(self, value: bytes) -> None:
        if self.flexible:
            self.uvarint(len(value) + 1)
        else:
            self.out += _INT32.pack(len(value))
        self.out += value

    def nullable_bytes(self, value: bytes | None) -> None:
        if value is not None:
            self.bytes_(value)
        elif self.flexible:
            self.uvarint(0)
        else:
            self.out += _INT32.pack(-1)

    def array_length(self, count: int) -> None:
        if self.flexible:
            self.uvarint(count + 1)
        else:
            self.out += _INT32.pack(count)

    def int32_array(self, values: tuple[int, ...] | list[int]) -> None:
        self.array_length(len(values))
        self.out += struct.pack(f">{len(values)}i", *values)

    def string_array(self, values: tuple[str, ...] | list[str]) -> None:
        self.array_length(len(values))
        for value in values:
            self.string(value)

    def tagged_fields(self, tags: Sequence[tuple[int, bytes]] = ()) -> None:
        """The tagged-field section: ``tags`` as (tag, encoded value) in increasing tag
        order, those whose value is not their field's default (Kafka writes only
        those)."""
        if not self.flexible:
            return
        self.uvarint(len(tags))
        for tag, data in tags:
            self.uvarint(tag)
            self.uvarint(len(data))
            self.out += data


class RecordReader:
    """Reads fields from ``buf`` starting at ``pos``. Not thread-safe: one reader per
    record being decoded."""

    __slots__ = ("buf", "flexible", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int, flexible: bool) -> None:
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise MessageFormatError(f"record ends early: {n} bytes wanted at {self.pos}")
        data = bytes(self.buf[self.pos : end])
        self.pos = end
        return data

    def int8(self) -> int:
        value: int = _INT8.unpack(self._take(1))[0]
        return value

    def int16(self) -> int:
        value: int = _INT16.unpack(self._take(2))[0]
        return value

    def int32(self) -> int:
        value: int = _INT32.unpack(self._take(4))[0]
        return value

    def int64(self) -> int:
        value: int = _INT64.unpack(self._take(8))[0]
        return value

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(_UUID_SIZE))

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise MessageFormatError("varint longer than 5 bytes")

    def _length(self, nullable: bool, classic: struct.Struct) -> int:
        """The length that follows; -1 for null (only where ``nullable``)."""
        if self.flexible:
            length = self.uvarint() - 1
        else:
            length = classic.unpack(self._take(classic.size))[0]
        if length < -1 or (length == -1 and not nullable):
            raise MessageFormatError(f"invalid length {length} at {self.pos}")
        return length

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise MessageFormatError("null where the schema wants a string")
        return value

    def nullable_string(self) -> str | None:
        length = self._length(True, _INT16)
        if length == -1:
            return None
        try:
            return self._take(length).decode()
        except UnicodeDecodeError as e:
            raise MessageFormatError(f"string is not UTF-8: {e}") from None

    def bytes_(self) -> bytes:
        return self._take(self._length(False, _INT32))

    def nullable_bytes(self) -> bytes | None:
        length = self._length(True, _INT32)
        return None if length == -1 else self._take(length)

    def array_length(self) -> int:
        return self._length(False, _INT32)

    def int32_array(self) -> tuple[int, ...]:
        count = self.array_length()
        return struct.unpack(f">{count}i", self._take(4 * count))

    def string_array(self) -> tuple[str, ...]:
        return tuple(self.string() for _ in range(self.array_length()))

    def tagged_value(self, fmt: struct.Struct, data: bytes) -> tuple[Any, ...]:
        """A known tagged field's encoded value read with ``fmt``; MessageFormatError
        when its size is not the field's."""
        if len(data) != fmt.size:
            raise MessageFormatError(f"tagged value of {len(data)} bytes, {fmt.size} wanted")
        return fmt.unpack(data)

    def tagged_fields(self) -> dict[int, bytes]:
        """The tagged-field section as tag -> encoded value; a reader takes the tags it
        knows and skips the rest, as Kafka's readers do."""
        tags: dict[int, bytes] = {}
        if not self.flexible:
            return tags
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self._take(self.uvarint())
        return tags

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise MessageFormatError(f"{len(self.buf) - self.pos} bytes after the record")


def record_version(buf: bytes | memoryview) -> int:
    """The int16 version every key and value starts with."""
    if len(buf) < _INT16.size:
        raise MessageFormatError("record shorter than its version prefix")
    version: int = _INT16.unpack_from(buf, 0)[0]
    return version
