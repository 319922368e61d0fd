"""Declaring a metadata record once, as Kafka's JSON schema does, and encoding it.

A record is a frozen, keyword-only dataclass whose fields are declared with
`schema_field` in the order of its schema in Kafka's
metadata/src/main/resources/common/metadata/*.json: the field's type (`field_types`),
the versions that have it ("0+", "2+"...), whether it is nullable and, for a tagged
field, its tag. Decorated with `metadata_record` (nested structs with `message_struct`),
the class gets one codec per version, compiled from those declarations as Kafka's
MessageGenerator compiles the JSON into the Java message classes:

    message  =  its untagged fields, in declaration order, in the flexible encoding
                (`flexible_encoding`), then its tagged fields:
    tagged   =  uvarint count, then per field, in increasing tag order:
                uvarint tag, uvarint size, the value's bytes

What the generated Java does, this does: a tagged field is written only when its value
differs from its default; a field a version lacks reads as its default, and writing a
non-default value for it is an UnsupportedVersionError ("Attempted to write a
non-default X at version N"); a tag the version does not know is kept, in
``unknown_tagged_fields``, and written back in tag order (Kafka's _unknownTaggedFields).
Reading is stricter than Kafka's only in checking that a known tagged field's value
fills exactly the size its header gave. Everything a reader refuses is a
`MetadataParseError`.

Decoded messages are built without running the dataclass's ``__init__``: a frozen
dataclass assigns each field through ``object.__setattr__``, which for a partition's
eleven fields cost more than decoding them. Message classes therefore have no
``__post_init__`` and no ``__slots__`` (the fields are set in ``__dict__``).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Self, TypeVar

from tiercel.protocol.errors import UnsupportedVersionError
from tiercel.protocol.metadata.field_types import (
    FieldSpec,
    FieldType,
    ValueReader,
    ValueWriter,
    array_reader,
    array_writer,
)
from tiercel.protocol.metadata.flexible_encoding import MetadataParseError
from tiercel.protocol.metadata.message_codegen import MessageCodec, compile_codec

__all__ = [
    "MetadataMessage",
    "MetadataRecord",
    "codec_for",
    "field_specs",
    "message_struct",
    "metadata_record",
    "schema_field",
    "struct_array",
]

M = TypeVar("M", bound="MetadataMessage")
R = TypeVar("R", bound="MetadataRecord")

_SPEC: Final = "kafka_schema"
_UNSET: Final = object()


def schema_field(
    field_type: FieldType,
    versions: str = "0+",
    *,
    nullable: bool = False,
    tag: int | None = None,
    default: object = _UNSET,
) -> Any:
    """A dataclass field declared as in Kafka's JSON schema; without ``default``, the
    type's own default (0, false, "", the zero uuid, empty)."""
    if not versions.endswith("+") or not versions[:-1].isdigit():
        raise ValueError(f"versions {versions!r} is not of the form 'N+'")
    value = field_type.default if default is _UNSET else default
    spec = FieldSpec(field_type, int(versions[:-1]), nullable, tag, value)
    return dataclasses.field(default=value, metadata={_SPEC: spec})


@dataclass(frozen=True, kw_only=True)
class MetadataMessage:
    """A metadata record or one of its nested structs. ``unknown_tagged_fields`` holds,
    as (tag, encoded value) pairs in tag order, the tagged fields the version read did
    not define, so that rewriting a record loses nothing a newer writer put in it."""

    unknown_tagged_fields: tuple[tuple[int, bytes], ...] = ()


@dataclass(frozen=True, kw_only=True)
class MetadataRecord(MetadataMessage):
    """A record of the metadata log: one of Kafka's MetadataRecordType, known by its api
    key, with the versions Kafka 4.0 defines for it."""

    API_KEY: ClassVar[int]
    LOWEST_SUPPORTED_VERSION: ClassVar[int] = 0
    HIGHEST_SUPPORTED_VERSION: ClassVar[int]
    _codecs: ClassVar[tuple[MessageCodec, ...]]

    def write_to(self, out: bytearray, version: int) -> None:
        """Appends the record's bytes in ``version`` (Kafka's ApiMessage.write)."""
        if not 0 <= version <= self.HIGHEST_SUPPORTED_VERSION:
            raise UnsupportedVersionError(f"Can't write version {version} of {type(self).__name__}")
        try:
            self._codecs[version].write(out, self)
        except (struct.error, TypeError, AttributeError, UnicodeEncodeError) as e:
            raise ValueError(f"{type(self).__name__} v{version}: {e}") from e

    @classmethod
    def read_from(cls, buf: bytes | memoryview, pos: int, version: int) -> tuple[Self, int]:
        """The record at ``pos`` in ``version``, and the position after it."""
        if not 0 <= version <= cls.HIGHEST_SUPPORTED_VERSION:
            raise MetadataParseError(f"Can't read version {version} of {cls.__name__}")
        try:
            record, end = cls._codecs[version].read(buf, pos)
        except (struct.error, IndexError):
            # A fixed-width field or a tag count past the end of the bytes.
            raise MetadataParseError(f"{cls.__name__} v{version}: record ends early") from None
        return record, end


def message_struct(cls: type[M]) -> type[M]:
    """Marks a nested struct (its codecs are compiled with its record's)."""
    _check_declaration(cls)
    return cls


def metadata_record(*, api_key: int, versions: str) -> Callable[[type[R]], type[R]]:
    """Makes ``cls`` the record of ``api_key`` with ``versions`` ("0" or "0-3", the
    schema's "validVersions": every metadata record's start at 0), compiling a codec for
    each version."""
    low, _, high = versions.partition("-")
    if low != "0":
        raise ValueError(f"versions {versions!r} do not start at 0")

    def decorate(cls: type[R]) -> type[R]:
        _check_declaration(cls)
        cls.API_KEY = api_key
        cls.HIGHEST_SUPPORTED_VERSION = int(high or low)
        cls._codecs = tuple(codec_for(cls, v) for v in range(cls.HIGHEST_SUPPORTED_VERSION + 1))
        return cls

    return decorate


def _check_declaration(cls: type[MetadataMessage]) -> None:
    if "__post_init__" in vars(cls) or "__slots__" in vars(cls):
        raise TypeError(f"{cls.__name__}: a message has no __post_init__ and no __slots__")
    tags = [spec.tag for spec in field_specs(cls).values() if spec.tag is not None]
    if len(tags) != len(set(tags)):
        raise TypeError(f"{cls.__name__}: two fields share a tag")


def struct_array(element: type[MetadataMessage]) -> FieldType:
    """The type ``[]Element`` of an array of nested structs (a schema field with its own
    "fields"), each element encoded in the message's version."""

    def make_reader(field: str, nullable: bool, version: int) -> ValueReader:
        return array_reader(codec_for(element, version).read, field, nullable)

    def make_writer(field: str, nullable: bool, version: int) -> ValueWriter:
        return array_writer(codec_for(element, version).write, field, nullable)

    return FieldType(f"[]{element.__name__}", (), None, make_reader, make_writer, element)


def field_specs(cls: type[MetadataMessage]) -> dict[str, FieldSpec]:
    """The declared fields of a message class, by name, in declaration order."""
    return {f.name: f.metadata[_SPEC] for f in dataclasses.fields(cls) if _SPEC in f.metadata}


_codecs: dict[tuple[type[MetadataMessage], int], MessageCodec] = {}


def codec_for(cls: type[MetadataMessage], version: int) -> MessageCodec:
    """The codec of ``cls`` in ``version``, compiled on first use."""
    codec = _codecs.get((cls, version))
    if codec is None:
        codec = _codecs[cls, version] = compile_codec(cls, version, list(field_specs(cls).items()))
    return codec
