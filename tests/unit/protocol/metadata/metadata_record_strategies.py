"""Hypothesis strategies for any metadata record in any of its versions, built from the
records' own field declarations: each field present in the version gets a value of its
type (nullable ones sometimes None), fields the version lacks keep their defaults, and
some records carry tagged fields their version does not know."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tiercel.protocol.metadata import field_types as t
from tiercel.protocol.metadata.field_types import FieldSpec, FieldType
from tiercel.protocol.metadata.message_schema import MetadataMessage, MetadataRecord, field_specs
from tiercel.protocol.metadata.metadata_record_type import METADATA_RECORD_TYPES

_TEXT = st.text(max_size=12)

_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    t.INT8.name: st.integers(-(2**7), 2**7 - 1),
    t.INT16.name: st.integers(-(2**15), 2**15 - 1),
    t.INT32.name: st.integers(-(2**31), 2**31 - 1),
    t.INT64.name: st.integers(-(2**63), 2**63 - 1),
    t.UINT16.name: st.integers(0, 2**16 - 1),
    t.BOOL.name: st.booleans(),
    t.FLOAT64.name: st.floats(allow_nan=False),
    t.UUID.name: st.uuids(),
    t.STRING.name: _TEXT,
    t.BYTES.name: st.binary(max_size=12),
    t.INT32_ARRAY.name: st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5).map(tuple),
    t.UUID_ARRAY.name: st.lists(st.uuids(), max_size=3).map(tuple),
    t.STRING_ARRAY.name: st.lists(_TEXT, max_size=3).map(tuple),
}


def _value(field_type: FieldType, version: int) -> st.SearchStrategy[Any]:
    if field_type.element is not None:
        return st.lists(message(field_type.element, version), max_size=3).map(tuple)
    return _SCALARS[field_type.name]


def _field(spec: FieldSpec, version: int) -> st.SearchStrategy[Any]:
    value = _value(spec.type, version)
    return st.none() | value if spec.nullable else value


def _unknown_tagged_fields(cls: type[MetadataMessage]) -> st.SearchStrategy[Any]:
    """Tags past every tag the class knows, each once, in order."""
    known = [spec.tag for spec in field_specs(cls).values() if spec.tag is not None]
    first = max(known, default=-1) + 1
    tags = st.lists(st.integers(first, first + 200), unique=True, max_size=2).map(sorted)
    return tags.flatmap(
        lambda chosen: st.tuples(
            *(st.tuples(st.just(tag), st.binary(max_size=4)) for tag in chosen)
        )
    )


def message(cls: type[MetadataMessage], version: int) -> st.SearchStrategy[Any]:
    fields = {
        name: _field(spec, version)
        for name, spec in field_specs(cls).items()
        if spec.since <= version
    }
    return st.builds(cls, unknown_tagged_fields=_unknown_tagged_fields(cls), **fields)


@st.composite
def records(draw: st.DrawFn) -> tuple[MetadataRecord, int]:
    """Any record type, any of its versions, and a record of that version."""
    cls = draw(st.sampled_from(sorted(METADATA_RECORD_TYPES.values(), key=lambda c: c.API_KEY)))
    version = draw(st.integers(0, cls.HIGHEST_SUPPORTED_VERSION))
    return draw(message(cls, version)), version
