"""Kafka's field types for the metadata records, each with its reader and writer.

A `FieldType` is what a JSON schema's ``"type"`` names (``int32``, ``string``,
``[]uuid``, ``[]BrokerEndpoint``...), with the default Kafka's MessageGenerator gives a
field of that type when the schema names none: 0 for numbers, false, "", the zero uuid,
empty bytes and empty arrays. Its factories build, for one field (its name, whether it
is nullable, the message's version), the field's codec in the flexible encoding
(`flexible_encoding`); nullable fields read and write None as the compact null.

Fixed-width types also give their `struct` format, so that a message's consecutive
fixed-width fields are read and written by one ``unpack_from`` or ``pack``
(`message_codegen`).

Values in Python: int for the integer types, bool, float, uuid.UUID, str, bytes, and
tuples for arrays. Arrays of structs are `message_schema.struct_array`.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from tiercel.protocol.metadata.flexible_encoding import (
    MAX_STRING_BYTES,
    MetadataParseError,
    read_compact_length,
    read_utf8,
    uuid_of,
    write_compact_length,
)

__all__ = [
    "BOOL",
    "BYTES",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT32_ARRAY",
    "INT64",
    "STRING",
    "STRING_ARRAY",
    "UINT16",
    "UUID",
    "UUID_ARRAY",
    "ZERO_UUID",
    "FieldSpec",
    "FieldType",
    "ValueReader",
    "ValueWriter",
    "array_reader",
    "array_writer",
]

ZERO_UUID: Final = uuid.UUID(int=0)

# Reads one value at a position; returns it and the position after it.
ValueReader = Callable[[bytes | memoryview, int], tuple[Any, int]]
# Appends one value.
ValueWriter = Callable[[bytearray, Any], None]


@dataclass(frozen=True, slots=True)
class FieldType:
    """A field type: its name in Kafka's schemas, the default of a field of this type,
    its `struct` format if it is fixed-width, and the factories of its codec (given the
    field's name, whether it is nullable and the message's version, which nested
    structs follow); for an array of structs, the struct's class."""

    name: str
    default: object
    fixed_format: str | None
    make_reader: Callable[[str, bool, int], ValueReader]
    make_writer: Callable[[str, bool, int], ValueWriter]
    element: type[Any] | None = None


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a schema: its type, the first version that has it (every metadata
    schema's "versions" is "N+"), whether it is nullable (in all the versions that have
    it, in every metadata schema), its tag if it is tagged, and its default."""

    type: FieldType
    since: int
    nullable: bool
    tag: int | None
    default: object


def _scalar(name: str, fmt: str, default: object) -> FieldType:
    codec = struct.Struct(">" + fmt)
    size = codec.size
    unpack_from = codec.unpack_from
    pack = codec.pack

    def make_reader(field: str, nullable: bool, version: int) -> ValueReader:
        def read(buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
            return unpack_from(buf, pos)[0], pos + size

        return read

    def make_writer(field: str, nullable: bool, version: int) -> ValueWriter:
        def write(out: bytearray, value: Any) -> None:
            out += pack(value)

        return write

    return FieldType(name, default, fmt, make_reader, make_writer)


def _uuid_reader(field: str, nullable: bool, version: int) -> ValueReader:
    def read(buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
        end = pos + 16
        return uuid_of(bytes(buf[pos:end])), end

    return read


def _uuid_writer(field: str, nullable: bool, version: int) -> ValueWriter:
    def write(out: bytearray, value: uuid.UUID) -> None:
        out += value.bytes

    return write


def _null(field: str) -> MetadataParseError:
    # Kafka's generated readers: "non-nullable field X was serialized as null".
    return MetadataParseError(f"non-nullable field {field} was serialized as null")


def _write_null(out: bytearray, field: str, nullable: bool) -> None:
    if not nullable:
        raise ValueError(f"non-nullable field {field} was set to null")
    out.append(0)


def _string_reader(field: str, nullable: bool, version: int) -> ValueReader:
    def read(buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
        length, pos = read_compact_length(buf, pos, 1)
        if length < 0:
            if nullable:
                return None, pos
            raise _null(field)
        if length > MAX_STRING_BYTES:
            raise MetadataParseError(f"string field {field} had invalid length {length}")
        end = pos + length
        return read_utf8(buf, pos, end, field), end

    return read


def _string_writer(field: str, nullable: bool, version: int) -> ValueWriter:
    def write(out: bytearray, value: str | None) -> None:
        if value is None:
            _write_null(out, field, nullable)
            return
        encoded = value.encode()
        if len(encoded) > MAX_STRING_BYTES:
            raise ValueError(f"'{field}' field is too long to be serialized")
        write_compact_length(out, len(encoded))
        out += encoded

    return write


def _bytes_reader(field: str, nullable: bool, version: int) -> ValueReader:
    def read(buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
        length, pos = read_compact_length(buf, pos, 1)
        if length < 0:
            if nullable:
                return None, pos
            raise _null(field)
        end = pos + length
        return bytes(buf[pos:end]), end

    return read


def _bytes_writer(field: str, nullable: bool, version: int) -> ValueWriter:
    def write(out: bytearray, value: bytes | None) -> None:
        if value is None:
            _write_null(out, field, nullable)
            return
        write_compact_length(out, len(value))
        out += value

    return write


def _int32_array_reader(field: str, nullable: bool, version: int) -> ValueReader:
    def read(buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
        count, pos = read_compact_length(buf, pos, 4)
        if count < 0:
            if nullable:
                return None, pos
            raise _null(field)
        return struct.unpack_from(f">{count}i", buf, pos), pos + 4 * count

    return read


def _int32_array_writer(field: str, nullable: bool, version: int) -> ValueWriter:
    def write(out: bytearray, values: tuple[int, ...] | None) -> None:
        if values is None:
            _write_null(out, field, nullable)
            return
        write_compact_length(out, len(values))
        out += struct.pack(f">{len(values)}i", *values)

    return write


def _uuid_array_reader(field: str, nullable: bool, version: int) -> ValueReader:
    def read(buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
        count, pos = read_compact_length(buf, pos, 16)
        if count < 0:
            if nullable:
                return None, pos
            raise _null(field)
        end = pos + 16 * count
        raw = bytes(buf[pos:end])
        return tuple(uuid_of(raw[i : i + 16]) for i in range(0, len(raw), 16)), end

    return read


def _uuid_array_writer(field: str, nullable: bool, version: int) -> ValueWriter:
    def write(out: bytearray, values: tuple[uuid.UUID, ...] | None) -> None:
        if values is None:
            _write_null(out, field, nullable)
            return
        write_compact_length(out, len(values))
        for value in values:
            out += value.bytes

    return write


def array_reader(element: ValueReader, field: str, nullable: bool) -> ValueReader:
    """The reader of an array whose elements ``element`` reads (each takes a byte at
    least, which bounds the count by what is left)."""

    def read(buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
        count, pos = read_compact_length(buf, pos, 1)
        if count < 0:
            if nullable:
                return None, pos
            raise _null(field)
        elements = []
        for _ in range(count):
            value, pos = element(buf, pos)
            elements.append(value)
        return tuple(elements), pos

    return read


def array_writer(element: ValueWriter, field: str, nullable: bool) -> ValueWriter:
    def write(out: bytearray, values: tuple[Any, ...] | None) -> None:
        if values is None:
            _write_null(out, field, nullable)
            return
        write_compact_length(out, len(values))
        for value in values:
            element(out, value)

    return write


def _string_array_reader(field: str, nullable: bool, version: int) -> ValueReader:
    return array_reader(_string_reader(field, False, version), field, nullable)


def _string_array_writer(field: str, nullable: bool, version: int) -> ValueWriter:
    return array_writer(_string_writer(field, False, version), field, nullable)


INT8: Final = _scalar("int8", "b", 0)
INT16: Final = _scalar("int16", "h", 0)
INT32: Final = _scalar("int32", "i", 0)
INT64: Final = _scalar("int64", "q", 0)
UINT16: Final = _scalar("uint16", "H", 0)
BOOL: Final = _scalar("bool", "?", False)
FLOAT64: Final = _scalar("float64", "d", 0.0)
UUID: Final = FieldType("uuid", ZERO_UUID, "16s", _uuid_reader, _uuid_writer)
STRING: Final = FieldType("string", "", None, _string_reader, _string_writer)
BYTES: Final = FieldType("bytes", b"", None, _bytes_reader, _bytes_writer)
INT32_ARRAY: Final = FieldType("[]int32", (), None, _int32_array_reader, _int32_array_writer)
UUID_ARRAY: Final = FieldType("[]uuid", (), None, _uuid_array_reader, _uuid_array_writer)
STRING_ARRAY: Final = FieldType("[]string", (), None, _string_array_reader, _string_array_writer)
