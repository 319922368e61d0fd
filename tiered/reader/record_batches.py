"""Stored RecordBatch v2 bytes into Arrow columns: framing, the consumer's checks, decoding.

Both sources of the reader hand over the same bytes: a remote segment's ``.log`` object
(`segment_reader`) and a broker's Fetch response records (`broker_tail`) are batches
back to back, exactly as the leader's log holds them. This module does what a Kafka
consumer does with them (Java's ``CompletedFetch``/``FetchCollector``), once for both:

- `whole_batches` cuts a buffer into whole batches by their ``batchLength``, stopping
  at a partial one, which a Fetch response may end with (Kafka's FetchResponse trims at
  the size limit, not at a batch boundary) and a ranged GET may end in;
- `append_batch` checks magic 2 and the CRC-32C (``DefaultRecordBatch.ensureValid``),
  skips control batches (transaction markers), decompresses (`protocol.compression`;
  lz4 and zstd into one reused scratch buffer when the decoder copies records out) and
  appends the records within an offset range to `RecordColumns`.

Errors are `CorruptBatchError` with a message that does not say where: each caller
knows the object and position, or the broker and fetch offset, and prefixes it.
"""

from __future__ import annotations

from collections.abc import Iterator

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
from tiercel.tiered.reader.record_columns import RecordColumns

__all__ = ["CorruptBatchError", "append_batch", "whole_batches"]


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


def append_batch(
    columns: RecordColumns,
    batch: bytes | memoryview,
    header: RecordBatchHeader,
    first_offset: int,
    last_offset: int,
    scratch: bytearray,
) -> None:
    """Append the records of ``batch`` (one whole batch, ``header`` read from it) whose
    offsets are ``first_offset`` to ``last_offset``; nothing for a control batch.
    ``scratch`` is the caller's buffer for decompressed records, reused batch after batch
    by a decoder that does not keep them (`RecordColumns.retains_records`)."""
    if header.magic != MAGIC_V2:
        raise CorruptBatchError(f"record batch magic {header.magic}, not 2")
    if not is_crc_valid(batch, 0, header):
        raise CorruptBatchError("record batch fails its CRC-32C check")
    if header.is_control:
        return
    payload = batch[RECORD_BATCH_OVERHEAD:]
    try:
        if columns.retains_records:
            _append(
                columns, header, decompress(header.compression, payload), first_offset, last_offset
            )
        else:
            with decompress_into(header.compression, payload, scratch) as records:
                _append(columns, header, records, first_offset, last_offset)
    except KafkaError as e:
        raise CorruptBatchError(str(e)) from e


def _append(
    columns: RecordColumns,
    header: RecordBatchHeader,
    records: bytes | bytearray | memoryview,
    first_offset: int,
    last_offset: int,
) -> None:
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    columns.append_records(
        records,
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        header.max_timestamp if log_append else None,
        first_offset,
        last_offset,
    )
