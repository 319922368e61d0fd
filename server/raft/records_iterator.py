"""Decoding the batches of the metadata log or of a snapshot into `Batch` values
(Kafka's ``RecordsIterator``): each batch's CRC is checked, a control batch becomes its
`ControlRecord` list, a data batch its records read through the `RecordSerde`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from tiercel.protocol.compression import decompress
from tiercel.protocol.errors import CorruptRecordError
from tiercel.protocol.record_batch import (
    MAGIC_V2,
    RECORDS_OFFSET,
    ReadableBuffer,
    RecordBatchHeader,
    is_crc_valid,
    iter_batches,
)
from tiercel.protocol.records import decode_records
from tiercel.server.raft.batch import Batch
from tiercel.server.raft.control_record import ControlRecord
from tiercel.server.raft.record_serde import RecordSerde

__all__ = ["decode_batch", "iter_decoded_batches"]

T = TypeVar("T")


def iter_decoded_batches(records: ReadableBuffer, serde: RecordSerde[T]) -> Iterator[Batch[T]]:
    """The batches of ``records`` (whole batches back to back). CorruptRecordError on a
    bad CRC, a truncated batch or records that do not parse."""
    view = memoryview(records)
    for position, header in iter_batches(view):
        yield decode_batch(view, position, header, serde)


def decode_batch(
    view: memoryview, position: int, header: RecordBatchHeader, serde: RecordSerde[T]
) -> Batch[T]:
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(f"Unexpected magic {header.magic} at offset {header.base_offset}")
    if not is_crc_valid(view, position, header):
        raise CorruptRecordError(f"Record batch at offset {header.base_offset} fails its CRC")
    end = position + header.size_in_bytes
    section = decompress(header.compression, view[position + RECORDS_OFFSET : end])
    decoded = decode_records(section, header.records_count)
    common = (
        header.base_offset,
        header.partition_leader_epoch,
        header.max_timestamp,
        header.size_in_bytes,
        header.last_offset,
    )
    if header.is_control:
        controls = [ControlRecord.decode(r.key, r.value) for r in decoded]
        return Batch(*common, control_records=controls)
    values = [serde.read(memoryview(r.value if r.value is not None else b"")) for r in decoded]
    return Batch(*common, records=values)
