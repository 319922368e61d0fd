"""Records of RecordBatch v2 straight into Arrow columns, with Spark's Kafka-source schema.

The record framing (`protocol.records`: length, attributes, timestamp and offset deltas,
key, value, headers, all varint-prefixed) is walked once per record, keeping only
positions and numbers: offsets, timestamps and lengths go into ``array`` buffers, keys
and values stay zero-copy ``memoryview`` slices of the decompressed records until
`to_arrow` joins them into one data buffer per column and builds the Arrow arrays from
buffers (`pyarrow.Array.from_buffers`), so no Python object is made per record beyond
the slices. Short varints (timestamp deltas and key sizes below 64; offset deltas,
record and value sizes below 8192: the common case, producers' large batches included)
are decoded inline, longer ones by `protocol.records`. Header keys are taken as UTF-8,
as Kafka's clients write them.

Not thread-safe: one accumulator per reading thread.
"""

from __future__ import annotations

import itertools
from array import array
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from tiercel.protocol.errors import InvalidRecordError
from tiercel.protocol.records import decode_varint, decode_varlong

__all__ = ["RecordColumns", "kafka_source_schema"]

CREATE_TIME: Final = 0  # Spark's timestampType: Kafka's TimestampType ids
LOG_APPEND_TIME: Final = 1
_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def kafka_source_schema(include_headers: bool = False) -> pa.Schema:
    """Spark's Kafka-source schema (KafkaRecordToRowConverter), ``headers`` when asked."""
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


class RecordColumns:
    """Columns of the records appended so far (`append_records`), for one partition."""

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
        self.data_bytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def append_records(  # noqa: C901 - the reader's per-record loop, kept flat for speed
        self,
        records: bytes | bytearray,
        count: int,
        base_offset: int,
        base_timestamp: int,
        log_append_time: int | None,
        first_offset: int,
        last_offset: int,
    ) -> None:
        """The ``count`` records of an uncompressed records section whose offsets are
        ``first_offset`` to ``last_offset``; ``log_append_time`` is the batch's max
        timestamp when its timestamp type is LogAppendTime. InvalidRecordError when
        the framing is broken."""
        view = memoryview(records)
        end = len(records)
        offsets, timestamps = self.offsets, self.timestamps
        headers = self.include_headers
        appended = 0
        p = 0
        key_lengths, key_parts = self.keys.lengths, self.keys.parts
        value_lengths, value_parts = self.values.lengths, self.values.parts
        try:
            for _ in range(count):
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
                if not first_offset <= offset <= last_offset:
                    p = record_end
                    continue
                offsets.append(offset)
                timestamps.append(
                    base_timestamp + timestamp_delta if log_append_time is None else log_append_time
                )
                b = records[p]
                if b < 0x80:
                    size, p = (b >> 1) ^ -(b & 1), p + 1
                else:
                    size, p = decode_varint(records, p)
                key_lengths.append(size)
                if size > 0:
                    key_parts.append(view[p : p + size])
                    p += size
                elif size < -1:
                    raise InvalidRecordError(f"invalid key size {size} at {p}")
                b = records[p]
                if b < 0x80:
                    size, p = (b >> 1) ^ -(b & 1), p + 1
                elif records[p + 1] < 0x80:
                    raw = (b & 0x7F) | (records[p + 1] << 7)
                    size, p = (raw >> 1) ^ -(raw & 1), p + 2
                else:
                    size, p = decode_varint(records, p)
                value_lengths.append(size)
                if size > 0:
                    value_parts.append(view[p : p + size])
                    p += size
                    appended += size
                elif size < -1:
                    raise InvalidRecordError(f"invalid value size {size} at {p}")
                if p > record_end:
                    raise InvalidRecordError(f"key or value past the record's end at {p}")
                if headers:
                    p = self._append_headers(records, view, p, record_end)
                p = record_end
        except IndexError:
            raise InvalidRecordError("records section ends inside a record") from None
        if p != end:
            raise InvalidRecordError(f"{end - p} bytes after the batch's {count} records")
        stamp = CREATE_TIME if log_append_time is None else LOG_APPEND_TIME
        self.timestamp_types.extend(
            itertools.repeat(stamp, len(offsets) - len(self.timestamp_types))
        )
        self.data_bytes += appended

    def _append_headers(
        self, records: bytes | bytearray, view: memoryview, p: int, end: int
    ) -> int:
        b = records[p]
        if b < 0x80:
            count, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            count, p = decode_varint(records, p)
        if count < 0 or count > end - p:
            raise InvalidRecordError(f"invalid header count {count}")
        self.header_counts.append(count)
        keys, values = self.header_keys, self.header_values
        for _ in range(count):
            b = records[p]
            if b < 0x80:
                size, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                size, p = decode_varint(records, p)
            if size < 0 or p + size > end:
                raise InvalidRecordError(f"invalid header key size {size}")
            keys.lengths.append(size)
            keys.parts.append(view[p : p + size])
            p += size
            b = records[p]
            if b < 0x80:
                size, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                size, p = decode_varint(records, p)
            if size < -1 or p + size > end:
                raise InvalidRecordError(f"invalid header value size {size}")
            values.lengths.append(size)
            if size > 0:
                values.parts.append(view[p : p + size])
                p += size
        return p

    def to_arrow(self, topic: str, partition: int) -> pa.RecordBatch:
        """The columns as one Arrow batch of `kafka_source_schema`."""
        n = len(self.offsets)
        columns = [
            self.keys.to_arrow(pa.binary()),
            self.values.to_arrow(pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.offsets)]),
            pa.Array.from_buffers(
                pa.timestamp("ms", tz="UTC"), n, [None, pa.py_buffer(self.timestamps)]
            ),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(self.timestamp_types)]),
        ]
        if self.include_headers:
            header_offsets = array("i", itertools.accumulate(self.header_counts, initial=0))
            entries = pa.StructArray.from_arrays(
                [
                    _utf8(self.header_keys.to_arrow(pa.string())),
                    self.header_values.to_arrow(pa.binary()),
                ],
                fields=list(_HEADER),
            )
            columns.append(
                pa.ListArray.from_arrays(
                    pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(header_offsets)]),
                    entries,
                )
            )
        return pa.RecordBatch.from_arrays(columns, schema=kafka_source_schema(self.include_headers))


def _utf8(keys: pa.Array) -> pa.Array:
    """``keys``, with malformed UTF-8 replaced by U+FFFD as Java's String constructor
    (Kafka's header decoding) replaces it; an Arrow string array must be valid UTF-8."""
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        raw = keys.cast(pa.binary()).to_pylist()
        return pa.array([key.decode("utf-8", "replace") for key in raw], pa.string())
    return keys
