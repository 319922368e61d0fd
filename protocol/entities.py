"""Building and encoding kio entities without per-version code in the handlers.

kio generates one dataclass per API version (``kio.schema.<api>.v<N>``). Handlers describe
a response once, as plain nested mappings with Kafka's field names, and `build_entity`
turns that into the entity of whatever version the client asked for: fields the version
lacks are dropped, missing fields take their schema default, and plain ints are coerced
into the rich types kio uses for some fields (``ErrorCode``, ``timedelta``, ``datetime``).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, fields, is_dataclass
from types import NoneType, UnionType
from typing import Any, Final, TypeVar, Union, cast, get_args, get_origin

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from tiercel.protocol.request_header import response_header_bytes, size_prefix

__all__ = [
    "ChunkWriter",
    "build_entity",
    "decode_request_body",
    "encode_entity",
    "encode_response_frame",
    "nested_entity",
    "request_class",
    "response_class",
]

E = TypeVar("E")

# Writes at least this long are kept by reference instead of being copied into the
# coalescing buffer: record data in fetch responses is the big one.
_BY_REFERENCE_THRESHOLD: Final = 16 * 1024


class ChunkWriter:
    """A ``Writable`` for kio's writers that avoids copying large values.

    Small writes (the many 2- and 4-byte fields) are coalesced into a bytearray; large
    ones (record sets) are appended to the chunk list as they are, so a fetch response
    goes to the socket without its records ever being copied by the encoder.
    """

    __slots__ = ("_chunks", "_pending", "size")

    def __init__(self) -> None:
        self._chunks: list[bytes | bytearray | memoryview] = []
        self._pending = bytearray()
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        length = len(data)
        self.size += length
        if length >= _BY_REFERENCE_THRESHOLD:
            if self._pending:
                self._chunks.append(self._pending)
                self._pending = bytearray()
            self._chunks.append(data)
        else:
            self._pending += data
        return length

    def chunks(self) -> list[bytes | bytearray | memoryview]:
        if self._pending:
            self._chunks.append(self._pending)
            self._pending = bytearray()
        return self._chunks


@functools.cache
def request_class(api_key: int, api_version: int) -> type[Any]:
    """The kio request entity class; raises kio's UnknownAPIKey/UnknownEntity if absent."""
    return load_request_schema(api_key, api_version)


@functools.cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    return load_response_schema(api_key, api_version)


_READERS: dict[type[Any], Callable[[Any, int], tuple[Any, int]]] = {}
_PLANS: dict[type[Any], tuple[_FieldPlan, ...]] = {}


def _reader(entity_type: type[Any]) -> Callable[[Any, int], tuple[Any, int]]:
    reader = _READERS.get(entity_type)
    if reader is None:
        reader = _READERS[entity_type] = entity_reader(entity_type)
    return reader


def decode_request_body(
    entity_type: type[E], frame: bytes | bytearray | memoryview, offset: int
) -> E:
    """Decode the request body that starts at ``offset``.

    Bytes after the body are ignored, as Kafka's parser ignores them (librdkafka sends
    some). kio's native reader raises its own exception types on malformed input;
    callers treat any exception here as an undecodable request.
    """
    entity, _ = _reader(entity_type)(frame, offset)
    return entity  # type: ignore[no-any-return]


def encode_entity(writer: ChunkWriter, entity: Any) -> None:
    # kio types its writers' target as a stream; ChunkWriter has the one method they use.
    entity_writer(type(entity))(cast(Any, writer), entity)


def encode_response_frame(correlation_id: int, entity: Any) -> list[bytes | bytearray | memoryview]:
    """A whole response frame, size prefix first: the response header of ``entity``'s
    version (flexible or not) under ``correlation_id``, then the entity."""
    writer = ChunkWriter()
    writer.write(response_header_bytes(correlation_id, entity.__header_schema__.__version__ >= 1))
    encode_entity(writer, entity)
    return [size_prefix(writer.size), *writer.chunks()]


def _to_millis_delta(value: Any) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=int(value))


def _to_datetime(value: Any) -> datetime.datetime | None:
    if value is None or isinstance(value, datetime.datetime):
        return value
    if value < 0:
        return None
    return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)


_COERCIONS: Final[Mapping[str, Callable[[Any], Any]]] = {
    "error_code": lambda v: v if isinstance(v, ErrorCode) else ErrorCode(v),
    "timedelta_i32": _to_millis_delta,
    "timedelta_i64": _to_millis_delta,
    "datetime_i64": _to_datetime,
}


_ZERO_VALUES: Final[Mapping[str, Any]] = {
    "string": "",
    "bytes": b"",
    "records": b"",
    "bool": False,
    "uuid": None,
    "float64": 0.0,
}


class _FieldPlan:
    """How to fill one field of an entity class from a mapping value."""

    __slots__ = ("coerce", "default", "name", "nested", "nested_is_tuple", "zero_value")

    def __init__(self, field: Field[Any]) -> None:
        self.name = field.name
        self.nested, self.nested_is_tuple = nested_entity(field.type)
        self.coerce = _COERCIONS.get(field.metadata.get("kafka_type", ""))
        self.default = _field_default(field)
        self.zero_value = _ZERO_VALUES.get(field.metadata.get("kafka_type", ""), 0)

    def zero(self) -> Any:
        if self.nested is not None:
            return () if self.nested_is_tuple else _build(self.nested, {}, fill_missing=True)
        if self.coerce is not None:
            return self.coerce(0)
        return self.zero_value

    def value(self, raw: Any, fill_missing: bool) -> Any:
        nested = self.nested
        if nested is not None:
            if self.nested_is_tuple:
                if raw is None:
                    return None
                return tuple(_build(nested, item, fill_missing) for item in raw)
            return None if raw is None else _build(nested, raw, fill_missing)
        if self.coerce is not None:
            return self.coerce(raw)
        return raw


_MISSING: Final = object()


def _is_union(field_type: Any) -> bool:
    return get_origin(field_type) in (UnionType, Union)


def nested_entity(field_type: Any) -> tuple[type[Any] | None, bool]:
    """(entity class, whether the field is an array of them) for a field holding nested
    entities, (None, False) for a primitive one. kio's field types are real types:
    ``X``, ``X | None``, ``tuple[X, ...]`` or ``tuple[X, ...] | None``, an entity
    class being a dataclass."""
    if _is_union(field_type):
        (inner,) = (arg for arg in get_args(field_type) if arg is not NoneType)
        return nested_entity(inner)
    if get_origin(field_type) is tuple:
        item = _entity_class(get_args(field_type)[0])
        return item, item is not None
    return _entity_class(field_type), False


def _entity_class(candidate: Any) -> type[Any] | None:
    return candidate if isinstance(candidate, type) and is_dataclass(candidate) else None


def _field_default(field: Field[Any]) -> Any:
    if field.default is not MISSING:
        return field.default
    if field.default_factory is not MISSING:
        return field.default_factory()
    nested, is_tuple = nested_entity(field.type)
    if "tag" in field.metadata and nested is not None and not is_tuple:
        # A tagged struct without a default (KIP-482): absent means every field of it
        # at its default, as Kafka's generated code initialises it.
        return _build(nested, {}, fill_missing=True)
    if _is_union(field.type) and NoneType in get_args(field.type):
        return None
    return _MISSING


def _plan(entity_type: type[Any]) -> tuple[_FieldPlan, ...]:
    plan = _PLANS.get(entity_type)
    if plan is None:
        plan = _PLANS[entity_type] = tuple(_FieldPlan(f) for f in fields(entity_type))
    return plan


def _build(entity_type: type[Any], values: Any, fill_missing: bool = False) -> Any:
    if not isinstance(values, Mapping):
        return values  # already an entity
    kwargs: dict[str, Any] = {}
    for plan in _plan(entity_type):
        raw = values.get(plan.name, _MISSING)
        if raw is not _MISSING:
            kwargs[plan.name] = plan.value(raw, fill_missing)
        elif plan.default is not _MISSING:
            kwargs[plan.name] = plan.default
        elif fill_missing:
            kwargs[plan.name] = plan.zero()
        else:
            raise TypeError(f"{entity_type.__qualname__}.{plan.name} has no value")
    return entity_type(**kwargs)


def build_entity(entity_type: type[E], values: Mapping[str, Any], fill_missing: bool = False) -> E:
    """Build ``entity_type`` from nested mappings; keys the version lacks are ignored.

    With ``fill_missing``, required fields without a value get their zero value (0, "",
    an empty array): an error response that only states its error code."""
    return _build(entity_type, values, fill_missing)  # type: ignore[no-any-return]


def entity_fields(entity_type: type[Any]) -> Sequence[str]:
    return tuple(plan.name for plan in _plan(entity_type))
