"""Transaction markers: the one record of a COMMIT or ABORT control batch (Kafka's
``EndTransactionMarker`` and ``ControlRecordType``).

A transaction coordinator ends a transaction by having every partition leader append a
control batch (attributes bit 5, and bit 4 as the batch belongs to a transaction) with
the producer's id and epoch, base sequence -1 and one record:

    key    int16 version (0)   int16 type (0 = ABORT, 1 = COMMIT)
    value  int16 version (0)   int32 coordinator epoch     (EndTxnMarker.json, v0)

Readers skip control batches; the log uses the marker to close the producer's
transaction (`storage.producer_state`). Control batches are never compressed.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.errors import InvalidRecordError
from tiercel.protocol.record_batch import (
    RECORD_BATCH_OVERHEAD,
    TimestampType,
    read_header,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.records import decode_records

__all__ = [
    "ControlRecordType",
    "EndTransactionMarker",
    "build_end_txn_marker_batch",
    "read_end_txn_marker",
]

_KEY: Final = struct.Struct(">hh")
_VALUE: Final = struct.Struct(">hi")
_CONTROL_KEY_VERSION: Final = 0
_END_TXN_MARKER_VERSION: Final = 0


class ControlRecordType(enum.IntEnum):
    """The control record types a data partition can hold (Kafka's ControlRecordType;
    the KRaft-only types never appear in a topic's log)."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker and the epoch of the coordinator that wrote it."""

    control_type: ControlRecordType
    coordinator_epoch: int

    @property
    def is_abort(self) -> bool:
        return self.control_type is ControlRecordType.ABORT

    def key(self) -> bytes:
        return _KEY.pack(_CONTROL_KEY_VERSION, self.control_type)

    def value(self) -> bytes:
        return _VALUE.pack(_END_TXN_MARKER_VERSION, self.coordinator_epoch)


def build_end_txn_marker_batch(
    marker: EndTransactionMarker,
    producer_id: int,
    producer_epoch: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    timestamp: int,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
) -> bytes:
    """The control batch holding ``marker`` (Kafka's MemoryRecords.withEndTransactionMarker)."""
    log_append = timestamp_type == TimestampType.LOG_APPEND_TIME
    return build_record_batch(
        [SimpleRecord(marker.key(), marker.value(), timestamp=timestamp)],
        base_offset=base_offset,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
        log_append_time=timestamp if log_append else None,
    )


def read_end_txn_marker(batch: bytes | bytearray | memoryview) -> EndTransactionMarker | None:
    """The marker of a whole control batch's bytes; None for another control type and
    for a control batch with no record: the log cleaner empties a marker it keeps only
    for its producer's epoch once its transaction is gone (Kafka's
    ProducerAppendInfo.append skips such a batch too). InvalidRecordError when the
    record cannot be a control record (Kafka refuses to read such a marker too)."""
    header = read_header(batch)
    if header.records_count == 0:
        return None
    data = batch[: header.size_in_bytes]
    records = decode_records(data, header.records_count, RECORD_BATCH_OVERHEAD)
    key, value = records[0].key, records[0].value
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError(f"control record key of {0 if key is None else len(key)} bytes")
    version, control_type = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"control record key version {version}")
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return None
    # Later marker versions only add fields after these (Kafka reads them the same way).
    if value is None or len(value) < _VALUE.size:
        raise InvalidRecordError("transaction marker value is too short")
    value_version, coordinator_epoch = _VALUE.unpack_from(value)
    if value_version < 0:
        raise InvalidRecordError(f"transaction marker version {value_version}")
    return EndTransactionMarker(ControlRecordType(control_type), coordinator_epoch)
