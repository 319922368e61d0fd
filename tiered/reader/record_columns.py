"""Records of RecordBatch v2 straight into Arrow columns, with Spark's Kafka-source schema.

The record framing (`protocol.records`: length, attributes, timestamp and offset deltas,
key, value, headers, all varint-prefixed) is walked once per record, keeping only
positions and numbers, and the Arrow arrays are built from buffers
(`pyarrow.Array.from_buffers`): no Python object per record. Two decoders do this, with
the same results and the same InvalidRecordError for broken framing:

- `NativeRecordColumns`, the C extension ``_record_columns`` (built by ``pip install``
  from ``_record_columns.c``; optional): appends straight into growable column buffers
  (int64 offsets and timestamps, int32 binary offsets, data, validity bitmaps) that
  pyarrow wraps without copying, and walks without the GIL.
- `PythonRecordColumns`, the fallback when the extension is not built: offsets,
  timestamps and lengths go into ``array`` buffers, keys and values stay zero-copy
  ``memoryview`` slices of the decompressed records until `to_arrow` joins them into one
  data buffer per column. Varints of one or two bytes (deltas and lengths below 64 and
  8192, the common case) are decoded inline, longer ones by `protocol.records`.

`new_record_columns` picks the native one unless `pure_python` is set, which the
environment variable ``TIERCEL_READER_PURE_PYTHON=1`` sets at import (tests and
benchmarks compare the two). Header keys are taken as UTF-8, as Kafka's clients write
them. Every record is checked as Kafka's ``DefaultRecord.readFrom`` checks it, those
outside the offset clip too: its fields must end exactly where its length says.

Not thread-safe: one accumulator per reading thread.
"""

from __future__ import annotations

import itertools
import os
from array import array
from typing import Final, Protocol, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from tiercel.protocol.errors import InvalidRecordError
from tiercel.protocol.records import decode_varint, decode_varlong

try:
    from tiercel.tiered.reader import _record_columns
except ImportError:  # not built (no compiler at install time): the Python decoder
    _record_columns = None  # type: ignore[assignment]

__all__ = [
    "NativeRecordColumns",
    "PythonRecordColumns",
    "RecordColumns",
    "kafka_source_schema",
    "native_available",
    "new_record_columns",
]

# Column buffers as the two decoders hand them to pyarrow.
_Buffer: TypeAlias = "array[int] | _record_columns.Buffer"

# Whether `new_record_columns` uses the Python decoder even when the native one is built.
pure_python: bool = os.environ.get("TIERCEL_READER_PURE_PYTHON", "") not in ("", "0")

CREATE_TIME: Final = 0  # Spark's timestampType: Kafka's TimestampType ids
LOG_APPEND_TIME: Final = 1
# What a batch holds besides key, value and header bytes, counted into its size so that
# records of null or empty keys and values bound it too (as the native decoder counts):
# per row its int64 offset and timestamp, int32 timestamp type and the int32 offsets of
# its key and value (and of its header list, with headers); per header the int32 offsets
# of its key and value.
_ROW_BYTES: Final = 28
_HEADER_LIST_BYTES: Final = 4
_HEADER_BYTES: Final = 8
# Arrow's binary columns have int32 offsets: no column of a batch may pass this.
_MAX_BATCH_BYTES: Final = 2**31 - 1
_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def kafka_source_schema(include_headers: bool = False) -> pa.Schema:
    """Spark's Kafka-source schema (KafkaRecordToRowConverter), ``headers`` when asked
    (null for a record without headers, as Spark gives it)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(_HEADER)))
    return pa.schema(fields)


class _BinaryColumn:
    """Slices and lengths (-1: null) of one binary column."""

    __slots__ = ("lengths", "parts")

    def __init__(self) -> None:
        self.parts: list[memoryview] = []
        self.lengths = array("i")

    def to_arrow(self, arrow_type: pa.DataType) -> pa.Array:
        n = len(self.lengths)
        lengths = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(self.lengths)])
        valid = pc.greater_equal(lengths, 0)
        null_count = n - pc.sum(valid).as_py() if n else 0
        ends = pc.cumulative_sum(pc.max_element_wise(lengths, 0))
        offsets = pa.concat_arrays([pa.array([0], pa.int32()), ends.cast(pa.int32())]).buffers()[1]
        data = pa.py_buffer(b"".join(self.parts))
        validity = valid.buffers()[1] if null_count else None
        return pa.Array.from_buffers(arrow_type, n, [validity, offsets, data], null_count)


class RecordColumns(Protocol):
    """Columns of the records appended so far (`append_records`), for one partition."""

    # Whether the columns keep views of the records given to `append_records` until
    # `to_arrow` (the Python decoder), so the caller must not reuse their buffer; the
    # native decoder copies keys and values out.
    retains_records: bool

    @property
    def batch_bytes(self) -> int:
        """The Arrow bytes appended so far (the size of the batch): keys, values,
        headers, and the offsets, timestamps and lengths beside them."""
        ...

    def __len__(self) -> int: ...

    def append_records(
        self,
        records: bytes | bytearray | memoryview,
        count: int,
        base_offset: int,
        base_timestamp: int,
        log_append_time: int | None,
        first_offset: int,
        last_offset: int,
        start: int,
        batch_bytes: int,
    ) -> tuple[int, int]:
        """The ``count`` records from position ``start`` of an uncompressed records
        section, those with offsets ``first_offset`` to ``last_offset`` appended
        (``log_append_time`` is the batch's max timestamp when its timestamp type is
        LogAppendTime), until the columns hold ``batch_bytes``: (the position after the
        last record walked, the records not walked). The caller takes the batch and goes
        on from there. InvalidRecordError when the framing is broken."""
        ...

    def to_arrow(self, topic: str, partition: int) -> pa.RecordBatch:
        """The columns as one Arrow batch of `kafka_source_schema`."""
        ...


def native_available() -> bool:
    """Whether the native decoder (the ``_record_columns`` extension) is built."""
    return _record_columns is not None


def new_record_columns(include_headers: bool) -> RecordColumns:
    """Empty columns, decoded natively when the extension is built and `pure_python` is
    not set."""
    if _record_columns is None or pure_python:
        return PythonRecordColumns(include_headers)
    return NativeRecordColumns(include_headers)


class PythonRecordColumns:
    """`RecordColumns` decoded in Python: the fallback and the native decoder's twin."""

    retains_records = True

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.offsets = array("q")
        self.timestamps = array("q")
        self.timestamp_types = array("i")
        self.keys = _BinaryColumn()
        self.values = _BinaryColumn()
        self.header_counts = array("i")
        self.header_keys = _BinaryColumn()
        self.header_values = _BinaryColumn()
        self.batch_bytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def append_records(  # noqa: C901 - the reader's per-record loop, kept flat for speed
        self,
        records: bytes | bytearray | memoryview,
        count: int,
        base_offset: int,
        base_timestamp: int,
        log_append_time: int | None,
        first_offset: int,
        last_offset: int,
        start: int,
        batch_bytes: int,
    ) -> tuple[int, int]:
        """See `RecordColumns.append_records`."""
        view = memoryview(records)
        end = len(records)
        offsets, timestamps = self.offsets, self.timestamps
        headers = self.include_headers
        row_bytes = _ROW_BYTES + _HEADER_LIST_BYTES if headers else _ROW_BYTES
        size_now = self.batch_bytes
        p = start
        count = max(count, 0)
        key_lengths, key_parts = self.keys.lengths, self.keys.parts
        value_lengths, value_parts = self.values.lengths, self.values.parts
        try:
            while count:
                record_start = p
                # Varints of one or two bytes inline (zigzag-decoded below); longer ones
                # through `decode_varint`, which returns them decoded.
                b = records[p]
                if b < 0x80:
                    length, p = (b >> 1) ^ -(b & 1), p + 1
                elif records[p + 1] < 0x80:
                    raw = (b & 0x7F) | (records[p + 1] << 7)
                    length, p = (raw >> 1) ^ -(raw & 1), p + 2
                else:
                    length, p = decode_varint(records, p)
                record_end = p + length
                if length <= 0 or record_end > end:
                    raise InvalidRecordError(f"invalid record size {length} at {p}")
                b = records[p + 1]
                if b < 0x80:
                    timestamp_delta, p = (b >> 1) ^ -(b & 1), p + 2
                else:
                    timestamp_delta, p = decode_varlong(records, p + 1)
                b = records[p]
                if b < 0x80:
                    offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
                elif records[p + 1] < 0x80:  # deltas 64-8191: producers' large batches
                    raw = (b & 0x7F) | (records[p + 1] << 7)
                    offset_delta, p = (raw >> 1) ^ -(raw & 1), p + 2
                else:
                    offset_delta, p = decode_varint(records, p)
                offset = base_offset + offset_delta
                wanted = first_offset <= offset <= last_offset
                if wanted:
                    # Its key, value and header bytes are fewer than its length: in an
                    # empty batch they always fit Arrow's int32 offsets.
                    if offsets and size_now + length > _MAX_BATCH_BYTES:
                        p = record_start
                        break
                    offsets.append(offset)
                    timestamps.append(
                        base_timestamp + timestamp_delta
                        if log_append_time is None
                        else log_append_time
                    )
                    size_now += row_bytes
                b = records[p]
                if b < 0x80:
                    size, p = (b >> 1) ^ -(b & 1), p + 1
                else:
                    size, p = decode_varint(records, p)
                if size > 0:
                    if wanted:
                        key_parts.append(view[p : p + size])
                        size_now += size
                    p += size
                elif size < -1:
                    raise InvalidRecordError(f"invalid key size {size} at {p}")
                if wanted:
                    key_lengths.append(size)
                b = records[p]
                if b < 0x80:
                    size, p = (b >> 1) ^ -(b & 1), p + 1
                elif records[p + 1] < 0x80:
                    raw = (b & 0x7F) | (records[p + 1] << 7)
                    size, p = (raw >> 1) ^ -(raw & 1), p + 2
                else:
                    size, p = decode_varint(records, p)
                if size > 0:
                    if wanted:
                        value_parts.append(view[p : p + size])
                        size_now += size
                    p += size
                elif size < -1:
                    raise InvalidRecordError(f"invalid value size {size} at {p}")
                if wanted:
                    value_lengths.append(size)
                if p > record_end:
                    raise InvalidRecordError(f"key or value past the record's end at {p}")
                if records[p] or (wanted and headers):
                    p, size = self._walk_headers(records, view, p, record_end, wanted and headers)
                    size_now += size
                else:  # no headers, none to append
                    p += 1
                if p != record_end:
                    # Kafka's DefaultRecord.readFrom: the fields must fill the record exactly.
                    raise InvalidRecordError(
                        f"invalid record size: expected to read {length} bytes in record "
                        f"payload, but instead read {p - record_end + length}"
                    )
                count -= 1
                if wanted and size_now >= batch_bytes:
                    break
        except IndexError:
            raise InvalidRecordError("records section ends inside a record") from None
        except OverflowError:  # base timestamp + delta past a long: array("q") refuses it
            raise InvalidRecordError(f"record timestamp out of range at {p}") from None
        if not count and p != end:
            raise InvalidRecordError(f"{end - p} bytes after the last of the batch's records")
        stamp = CREATE_TIME if log_append_time is None else LOG_APPEND_TIME
        self.timestamp_types.extend(
            itertools.repeat(stamp, len(offsets) - len(self.timestamp_types))
        )
        self.batch_bytes = size_now
        return p, count

    def _walk_headers(
        self,
        records: bytes | bytearray | memoryview,
        view: memoryview,
        p: int,
        end: int,
        append: bool,
    ) -> tuple[int, int]:
        """The headers at ``p`` of a record ending at ``end``, checked, and appended to
        the row just appended when ``append``: the position after them, and the Arrow
        bytes appended."""
        count, p = decode_varint(records, p)
        if count < 0 or count > end - p:
            raise InvalidRecordError(f"invalid header count {count}")
        keys, values = self.header_keys, self.header_values
        appended = _HEADER_BYTES * count
        for _ in range(count):
            b = records[p]
            if b < 0x80:
                size, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                size, p = decode_varint(records, p)
            if size < 0 or p + size > end:
                raise InvalidRecordError(f"invalid header key size {size}")
            if append:
                keys.lengths.append(size)
                keys.parts.append(view[p : p + size])
            p += size
            appended += size
            b = records[p]
            if b < 0x80:
                size, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                size, p = decode_varint(records, p)
            if size < -1 or p + size > end:
                raise InvalidRecordError(f"invalid header value size {size}")
            if append:
                values.lengths.append(size)
                if size > 0:
                    values.parts.append(view[p : p + size])
            if size > 0:
                p += size
                appended += size
        if not append:
            return p, 0
        self.header_counts.append(count)
        return p, appended

    def to_arrow(self, topic: str, partition: int) -> pa.RecordBatch:
        """The columns as one Arrow batch of `kafka_source_schema`."""
        headers = None
        if self.include_headers:
            rows = len(self.offsets)
            header_offsets = array("i", itertools.accumulate(self.header_counts, initial=0))
            counts = pa.Array.from_buffers(
                pa.int32(), rows, [None, pa.py_buffer(self.header_counts)]
            )
            has_headers = pc.greater(counts, 0)
            nulls = rows - pc.sum(has_headers).as_py() if rows else 0
            headers = _headers(
                rows,
                header_offsets,
                has_headers.buffers()[1] if nulls else None,
                nulls,
                self.header_keys.to_arrow(pa.string()),
                self.header_values.to_arrow(pa.binary()),
            )
        return _record_batch(
            topic,
            partition,
            self.keys.to_arrow(pa.binary()),
            self.values.to_arrow(pa.binary()),
            self.offsets,
            self.timestamps,
            self.timestamp_types,
            headers,
        )


if _record_columns is not None:

    class NativeRecordColumns(_record_columns.Columns):
        """`RecordColumns` decoded by the C extension; Arrow arrays over its buffers."""

        retains_records = False

        def to_arrow(self, topic: str, partition: int) -> pa.RecordBatch:
            """The columns as one Arrow batch of `kafka_source_schema`; the columns are
            empty afterwards (their buffers now belong to the batch)."""
            rows, offsets, timestamps, types, keys, values, header_parts = self.take()
            headers = None
            if header_parts is not None:
                header_offsets, validity, nulls, header_keys, header_values = header_parts
                headers = _headers(
                    rows,
                    header_offsets,
                    None if validity is None else pa.py_buffer(validity),
                    nulls,
                    _binary(pa.string(), header_keys),
                    _binary(pa.binary(), header_values),
                )
            return _record_batch(
                topic,
                partition,
                _binary(pa.binary(), keys),
                _binary(pa.binary(), values),
                offsets,
                timestamps,
                types,
                headers,
            )


def _binary(arrow_type: pa.DataType, column: _record_columns.BinaryBuffers) -> pa.Array:
    """A binary or string array over the native decoder's (offsets, data, validity, null
    count) buffers."""
    offsets, data, validity, nulls = column
    rows = len(offsets) // 4 - 1
    bitmap = None if validity is None else pa.py_buffer(validity)
    return pa.Array.from_buffers(
        arrow_type, rows, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], nulls
    )


def _headers(
    rows: int,
    offsets: _Buffer,
    validity: pa.Buffer | None,
    nulls: int,
    keys: pa.Array,
    values: pa.Array,
) -> pa.Array:
    """The headers column: per record, a list of (key, value) structs, or null when the
    record has no headers (``validity`` unset), as Spark's KafkaRecordToRowConverter
    gives them."""
    entries = pa.StructArray.from_arrays([_utf8(keys), values], fields=list(_HEADER))
    return pa.Array.from_buffers(
        pa.list_(_HEADER), rows, [validity, pa.py_buffer(offsets)], nulls, children=[entries]
    )


def _record_batch(
    topic: str,
    partition: int,
    keys: pa.Array,
    values: pa.Array,
    offsets: _Buffer,
    timestamps: _Buffer,
    timestamp_types: _Buffer,
    headers: pa.Array | None,
) -> pa.RecordBatch:
    """One batch of `kafka_source_schema`: topic and partition are constant for the
    batch, the other columns over the decoders' buffers."""
    n = len(keys)
    columns = [
        keys,
        values,
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
        pa.Array.from_buffers(pa.timestamp("ms", tz="UTC"), n, [None, pa.py_buffer(timestamps)]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(timestamp_types)]),
    ]
    if headers is not None:
        columns.append(headers)
    return pa.RecordBatch.from_arrays(columns, schema=kafka_source_schema(headers is not None))


def _utf8(keys: pa.Array) -> pa.Array:
    """``keys``, with malformed UTF-8 replaced by U+FFFD as Java's String constructor
    (Kafka's header decoding) replaces it; an Arrow string array must be valid UTF-8."""
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        raw = keys.cast(pa.binary()).to_pylist()
        return pa.array([key.decode("utf-8", "replace") for key in raw], pa.string())
    return keys
