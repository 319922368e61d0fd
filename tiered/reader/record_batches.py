"""Stored RecordBatch v2 bytes into Arrow columns: framing, the consumer's checks, decoding.

Both sources of the reader hand over the same bytes: a remote segment's ``.log`` object
(`segment_reader`) and a broker's Fetch response records (`broker_tail`) are batches
back to back, exactly as the leader's log holds them. This module does what a Kafka
consumer does with them (Java's ``CompletedFetch``/``FetchCollector``), once for both:

- `whole_batches` cuts a buffer into whole batches by their ``batchLength``, stopping
  at a partial one, which a Fetch response may end with (Kafka's FetchResponse trims at
  the size limit, not at a batch boundary) and a ranged GET may end in;
- `ArrowBatcher.append` checks magic 2 and the CRC-32C (``DefaultRecordBatch.ensureValid``),
  skips control batches (transaction markers), decompresses (`protocol.compression`;
  lz4 and zstd into one reused scratch buffer when the decoder copies records out) and
  appends the records within an offset range to `RecordColumns`, handing out an Arrow
  batch each time the columns hold ``batch_bytes``. The decoder counts every byte the
  batch holds (keys, values, headers, and the offsets and timestamps beside them) and
  stops mid-section when it is full, so a batch is bounded however the records are
  shaped (keys without values, many headers, a large batch decompressed) and no Python
  runs per record.

Errors are `CorruptBatchError` with a message that does not say where: each caller
knows the object and position, or the broker and fetch offset, and prefixes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

import pyarrow as pa

from tiercel.protocol.compression import decompress, decompress_into
from tiercel.protocol.errors import KafkaError
from tiercel.protocol.record_batch import (
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
    TimestampType,
    is_crc_valid,
    read_header,
)
from tiercel.tiered.reader.record_columns import RecordColumns, new_record_columns

__all__ = ["DEFAULT_BATCH_BYTES", "ArrowBatcher", "CorruptBatchError", "whole_batches"]

# Bytes per Arrow batch. Batches that stay in the CPU's caches while Spark's Python
# worker writes them out: 4 MiB took 30% less worker CPU than 16 MiB over 1 GB of 1 KiB
# values (tests/bench/spark_read.py), and no more per batch than 1 MiB.
DEFAULT_BATCH_BYTES: Final = 4 * 1024 * 1024


class CorruptBatchError(ValueError):
    """A batch that fails a consumer's checks or does not decode."""


def whole_batches(buffer: bytes, start: int = 0) -> Iterator[tuple[int, int]]:
    """(position, size) of each whole batch of ``buffer`` from ``start`` on, in order;
    stops before a partial batch (fewer bytes left than its header or its
    ``batchLength`` says). The caller keeps the rest, from the end of the last one."""
    used = start
    while len(buffer) - used >= RECORD_BATCH_OVERHEAD:
        size = read_header(buffer, used).batch_length + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD:
            raise CorruptBatchError(f"bad batch size {size}")
        if len(buffer) - used < size:
            return
        yield used, size
        used += size


class ArrowBatcher:
    """The records of one topic partition's whole batches, appended in offset order,
    as Arrow batches of `record_columns.kafka_source_schema` of about ``batch_bytes``
    each (`RecordColumns.batch_bytes`: at most one record more). Not thread-safe: one
    per reading thread."""

    def __init__(
        self,
        topic: str,
        partition: int,
        include_headers: bool,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.batch_bytes = batch_bytes
        self._columns: RecordColumns = new_record_columns(include_headers)
        self._scratch = bytearray()  # lz4 and zstd records of one batch at a time

    def append(
        self,
        batch: bytes | memoryview,
        header: RecordBatchHeader,
        first_offset: int,
        last_offset: int,
    ) -> Iterable[pa.RecordBatch]:
        """Append the records of ``batch`` (one whole batch, ``header`` read from it)
        whose offsets are ``first_offset`` to ``last_offset``, nothing for a control
        batch: the Arrow batches that fill up meanwhile, to iterate before the next
        call (usually none: no generator is made then, this runs once per batch).
        CorruptBatchError."""
        if header.magic != MAGIC_V2:
            raise CorruptBatchError(f"record batch magic {header.magic}, not 2")
        if not is_crc_valid(batch, 0, header):
            raise CorruptBatchError("record batch fails its CRC-32C check")
        if header.is_control:
            return ()
        columns = self._columns
        log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
        section = (
            header.records_count,
            header.base_offset,
            header.base_timestamp,
            header.max_timestamp if log_append else None,
            first_offset,
            last_offset,
        )
        payload = batch[RECORD_BATCH_OVERHEAD:]
        try:
            if columns.retains_records:
                records: bytes | bytearray | memoryview = decompress(header.compression, payload)
            else:
                # The native decoder copies keys and values out: one scratch buffer
                # takes the records of every lz4 and zstd batch in turn.
                records = decompress_into(header.compression, payload, self._scratch)
            start, count = columns.append_records(records, *section, 0, self.batch_bytes)
        except KafkaError as e:
            raise CorruptBatchError(str(e)) from e
        if count or columns.batch_bytes >= self.batch_bytes:
            return self._filled(records, section, start, count)
        return ()

    def flush(self) -> Iterator[pa.RecordBatch]:
        """The last Arrow batch, if any record is left."""
        if len(self._columns):
            yield self._take()

    def _filled(
        self,
        records: bytes | bytearray | memoryview,
        section: tuple[int, int, int, int | None, int, int],
        start: int,
        count: int,
    ) -> Iterator[pa.RecordBatch]:
        """The full batch, then the ``count`` records left of ``records`` from
        ``start``, in batches as they fill (the decoder stops at the record that fills
        one, or before a record that would take it past Arrow's int32 offsets)."""
        while True:
            yield self._take()
            if not count:
                return
            try:
                start, count = self._columns.append_records(
                    records, count, *section[1:], start, self.batch_bytes
                )
            except KafkaError as e:
                raise CorruptBatchError(str(e)) from e
            if not count and self._columns.batch_bytes < self.batch_bytes:
                return

    def _take(self) -> pa.RecordBatch:
        batch = self._columns.to_arrow(self.topic, self.partition)
        self._columns = new_record_columns(self.include_headers)
        return batch
