"""Compiling a message's reader and writer for one version from its field declarations.

Kafka's MessageGenerator turns each JSON schema into Java classes whose read and write
methods handle every field inline. This does the same for a Python message class and
one version: it writes the source of a ``read`` and a ``write`` function and compiles
it (as `dataclasses` compiles ``__init__``). Decoding a partition change then costs a
few microseconds instead of one Python call per field and per step; the source stays
on the `MessageCodec` for whoever needs to read it.

What the generated functions do, field by field:

- untagged fields in declaration order; a run of consecutive fixed-width fields (ints,
  bool, float64, uuid) is one ``struct`` ``unpack_from``/``pack``, uuids as 16 bytes;
  every other field calls its type's reader or writer (`field_types`);
- then the tagged-field section: on read, each known tag's value is read with its
  type's reader and must fill exactly the size the tag's header gave, and unknown tags
  are kept as (tag, bytes) in ``unknown_tagged_fields``; on write, the fields whose
  value is not their default, merged with ``unknown_tagged_fields``, in tag order;
- a field the version lacks reads as its default; writing it with any other value
  raises UnsupportedVersionError, as Kafka's generated write does.

The decoded message is built without running the dataclass's ``__init__`` (its
``__dict__`` is set whole): a frozen dataclass assigns each field through
``object.__setattr__``, which for a partition's eleven fields cost more than decoding
them. Out-of-range values on write surface as ``struct.error`` or ``TypeError`` and a
short buffer on read as ``struct.error`` or ``IndexError``; `message_schema` turns
those into its errors.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from tiercel.protocol.errors import UnsupportedVersionError
from tiercel.protocol.metadata.field_types import FieldSpec, ValueReader, ValueWriter
from tiercel.protocol.metadata.flexible_encoding import (
    MetadataParseError,
    read_uvarint,
    uuid_of,
    write_uvarint,
)

__all__ = ["MessageCodec", "compile_codec"]

_UUID_FORMAT: Final = "16s"
_INDENT: Final = "    "


@dataclass(frozen=True, slots=True)
class MessageCodec:
    """A message class's reader and writer in one version, and their source."""

    read: ValueReader
    write: ValueWriter
    source: str


def compile_codec(
    cls: type[Any], version: int, fields: Sequence[tuple[str, FieldSpec]]
) -> MessageCodec:
    """The codec of ``cls`` in ``version``; ``fields`` are its declared fields in order."""
    present = [(name, spec) for name, spec in fields if spec.since <= version]
    absent = [(name, spec) for name, spec in fields if spec.since > version]
    untagged = [(name, spec) for name, spec in present if spec.tag is None]
    tagged = sorted(
        ((name, spec) for name, spec in present if spec.tag is not None),
        key=lambda entry: entry[1].tag or 0,
    )
    namespace: dict[str, Any] = {
        "_cls": cls,
        "_new": object.__new__,
        "_set": object.__setattr__,
        "_uuid_of": uuid_of,
        "_read_uvarint": read_uvarint,
        "_past_end": _past_end,
        "_wrong_size": _wrong_size,
        "_non_default": _non_default,
        "_write_tagged": _write_tagged,
    }
    for name, spec in fields:
        namespace[f"_d_{name}"] = spec.default
    for name, spec in present:
        namespace[f"_r_{name}"] = spec.type.make_reader(name, spec.nullable, version)
        namespace[f"_w_{name}"] = spec.type.make_writer(name, spec.nullable, version)
    source = "\n".join(
        [
            *_reader_source(
                cls.__name__, [name for name, _ in fields], untagged, tagged, namespace
            ),
            *_writer_source(version, untagged, tagged, absent, namespace),
        ]
    )
    exec(compile(source, f"<{cls.__name__} v{version} codec>", "exec"), namespace)
    return MessageCodec(namespace["read"], namespace["write"], source)


def _runs(fields: list[tuple[str, FieldSpec]]) -> list[list[tuple[str, FieldSpec]]]:
    """The untagged fields cut into runs: consecutive fixed-width fields together, every
    other field alone."""
    runs: list[list[tuple[str, FieldSpec]]] = []
    for name, spec in fields:
        fixed = spec.type.fixed_format is not None
        if fixed and runs and runs[-1][-1][1].type.fixed_format is not None:
            runs[-1].append((name, spec))
        else:
            runs.append([(name, spec)])
    return runs


def _reader_source(
    class_name: str,
    names: list[str],
    untagged: list[tuple[str, FieldSpec]],
    tagged: list[tuple[str, FieldSpec]],
    namespace: dict[str, Any],
) -> list[str]:
    lines = ["def read(buf, pos):"]
    for index, run in enumerate(_runs(untagged)):
        name, spec = run[0]
        if spec.type.fixed_format is None:
            lines.append(f"    f_{name}, pos = _r_{name}(buf, pos)")
            continue
        codec = struct.Struct(">" + "".join(str(s.type.fixed_format) for _, s in run))
        namespace[f"_unpack{index}"] = codec.unpack_from
        targets = "".join(f"f_{n}, " for n, _ in run)
        lines.append(f"    ({targets}) = _unpack{index}(buf, pos)")
        lines.append(f"    pos += {codec.size}")
        lines += [f"    f_{n} = _uuid_of(f_{n})" for n, s in run if _is_uuid(s)]
    lines += [f"    f_{name} = _d_{name}" for name, _ in tagged]
    lines += [
        "    unknown = ()",
        *_uvarint_source("count", _INDENT),
        "    if count:",
        "        found = []",
        "        for _ in range(count):",
        *_uvarint_source("tag", _INDENT * 3),
        *_uvarint_source("size", _INDENT * 3),
        "            end = pos + size",
        "            if end > len(buf):",
        f"                raise _past_end({class_name!r}, tag, size)",
    ]
    branch = "if"
    for name, spec in tagged:
        lines.append(f"            {branch} tag == {spec.tag}:")
        lines.append(f"                f_{name}, after = _r_{name}(buf, pos)")
        branch = "elif"
    body = _INDENT * 4 if tagged else _INDENT * 3
    if tagged:
        lines.append("            else:")
    lines += [
        f"{body}found.append((tag, bytes(buf[pos:end])))",
        f"{body}after = end",
        "            if after != end:",
        f"                raise _wrong_size({class_name!r}, tag, size, after - pos)",
        "            pos = end",
        "        if found:",
        "            unknown = tuple(sorted(found))",
        "    message = _new(_cls)",
        "    _set(message, '__dict__', {",
        "        'unknown_tagged_fields': unknown,",
    ]
    present = {name for name, _ in untagged} | {name for name, _ in tagged}
    lines += [
        f"        {name!r}: f_{name}," if name in present else f"        {name!r}: _d_{name},"
        for name in names
    ]
    lines += ["    })", "    return message, pos", ""]
    return lines


def _writer_source(
    version: int,
    untagged: list[tuple[str, FieldSpec]],
    tagged: list[tuple[str, FieldSpec]],
    absent: list[tuple[str, FieldSpec]],
    namespace: dict[str, Any],
) -> list[str]:
    lines = ["def write(out, message):"]
    for name, _ in absent:
        lines.append(f"    if message.{name} != _d_{name}:")
        lines.append(f"        raise _non_default({name!r}, {version})")
    for index, run in enumerate(_runs(untagged)):
        name, spec = run[0]
        if spec.type.fixed_format is None:
            lines.append(f"    _w_{name}(out, message.{name})")
            continue
        codec = struct.Struct(">" + "".join(str(s.type.fixed_format) for _, s in run))
        namespace[f"_pack{index}"] = codec.pack
        values = ", ".join(f"message.{n}.bytes" if _is_uuid(s) else f"message.{n}" for n, s in run)
        lines.append(f"    out += _pack{index}({values})")
    lines.append("    tagged = []")
    for name, spec in tagged:
        lines += [
            f"    value = message.{name}",
            f"    if value != _d_{name}:",
            "        encoded = bytearray()",
            f"        _w_{name}(encoded, value)",
            f"        tagged.append(({spec.tag}, encoded))",
        ]
    lines += ["    _write_tagged(out, tagged, message.unknown_tagged_fields)", ""]
    return lines


def _uvarint_source(variable: str, indent: str) -> list[str]:
    """Reading an unsigned varint, inline when it is one byte (tags, sizes and counts
    nearly always are)."""
    return [
        f"{indent}{variable} = buf[pos]",
        f"{indent}if {variable} < 0x80:",
        f"{indent}    pos += 1",
        f"{indent}else:",
        f"{indent}    {variable}, pos = _read_uvarint(buf, pos)",
    ]


def _is_uuid(spec: FieldSpec) -> bool:
    return spec.type.fixed_format == _UUID_FORMAT


def _past_end(struct_name: str, tag: int, size: int) -> MetadataParseError:
    return MetadataParseError(
        f"{struct_name}: tagged field {tag} of {size} bytes ends past the record"
    )


def _wrong_size(struct_name: str, tag: int, size: int, read: int) -> MetadataParseError:
    return MetadataParseError(
        f"{struct_name}: tagged field {tag} has {size} bytes, its value {read}"
    )


def _non_default(field: str, version: int) -> UnsupportedVersionError:
    return UnsupportedVersionError(f"Attempted to write a non-default {field} at version {version}")


def _write_tagged(
    out: bytearray,
    tagged: list[tuple[int, bytes | bytearray]],
    unknown: tuple[tuple[int, bytes], ...],
) -> None:
    """The tagged-field section: the known fields to write (in tag order) merged with the
    unknown ones kept from reading."""
    if unknown:
        tagged = sorted([*tagged, *unknown], key=lambda entry: entry[0])
        if len({tag for tag, _ in tagged}) != len(tagged):
            raise ValueError("an unknown tagged field has the tag of a known one")
    write_uvarint(out, len(tagged))
    for tag, encoded in tagged:
        write_uvarint(out, tag)
        write_uvarint(out, len(encoded))
        out += encoded
