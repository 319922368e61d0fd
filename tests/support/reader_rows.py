"""Records of every kind for the reader library's tests (tiered.reader): produced into a
real UnifiedLog, and the rows Spark's Kafka-source schema gives them back as."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from support.tiering import BASE_TS
from tiercel.protocol.compression import CompressionType
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.log_validator import validate_records
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.reader import kafka_source_schema

Headers = list[tuple[str, bytes | None]] | None
# offset, key, value, headers (None: none, Spark's null), timestamp (ms), timestampType
Row = tuple[int, bytes | None, bytes | None, Headers, int, int]


def header_pairs(cell: list[dict[str, Any]] | None) -> Headers:
    """A ``headers`` cell as (key, value) pairs; None, Spark's null, for a record
    without headers."""
    return None if cell is None else [(h["key"], h["value"]) for h in cell]


def produced_headers(headers: Sequence[tuple[str, bytes | None]]) -> Headers:
    """The ``headers`` cell Spark's Kafka source gives a record produced with
    ``headers``: null when there are none (KafkaRecordToRowConverter)."""
    return list(headers) or None


def records_for(batch_no: int) -> list[SimpleRecord]:
    """1 to 5 records: null keys and values, empty ones, headers (a null header value)."""
    out = []
    for i in range(batch_no % 5 + 1):
        n = batch_no * 10 + i
        key = None if n % 7 == 0 else f"key-{n}".encode()
        value = None if n % 11 == 0 else (b"" if n % 13 == 0 else f"value {n} ".encode() * (n % 9))
        headers = [("h", f"{n}".encode()), ("null", None)][: n % 3]
        out.append(SimpleRecord(key, value, headers, BASE_TS + n))
    return out


def produce_every_codec(log: UnifiedLog, batches: int, epoch: int = 0) -> list[Row]:
    """``batches`` batches, the codecs in turn, appended as leader of ``epoch``; the rows
    a consumer reads back."""
    expected: list[Row] = []
    for batch_no, codec in zip(range(batches), itertools.cycle(CompressionType), strict=False):
        records = records_for(batch_no)
        batch = build_record_batch(records, compression=codec)
        info = log.append_as_leader(validate_records(batch, log.config, BASE_TS), epoch, BASE_TS)
        for i, r in enumerate(records):
            assert r.timestamp is not None
            headers = produced_headers(r.headers)
            expected.append((info.first_offset + i, r.key, r.value, headers, r.timestamp, 0))
    return expected


def rows_of(batches: list[pa.RecordBatch]) -> list[Row]:
    """The rows of Arrow batches of the Kafka-source schema with headers."""
    table = pa.Table.from_batches(batches, kafka_source_schema(True))
    return [
        (
            r["offset"],
            r["key"],
            r["value"],
            header_pairs(r["headers"]),
            int(r["timestamp"].timestamp() * 1000),
            r["timestampType"],
        )
        for r in table.to_pylist()
    ]


def arrow_bytes(batch: pa.RecordBatch) -> int:
    """What the reader counts a batch of its schema to hold (`RecordColumns.batch_bytes`):
    per row 28 bytes of offset, timestamp, timestamp type and key and value offsets (4
    more for a header list), its key and value bytes, and per header 8 bytes of offsets
    and its key and value bytes."""

    def data(column: pa.Array) -> int:
        return int(pc.sum(pc.binary_length(column)).as_py() or 0)

    total = 28 * batch.num_rows + data(batch.column("key")) + data(batch.column("value"))
    if "headers" in batch.schema.names:
        entries = pc.list_flatten(batch.column("headers"))
        total += 4 * batch.num_rows + 8 * len(entries)
        total += data(entries.field("key").cast(pa.binary())) + data(entries.field("value"))
    return total
