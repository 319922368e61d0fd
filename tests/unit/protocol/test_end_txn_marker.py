"""Transaction markers as Kafka writes them: a control batch (attributes bit 5, and bit
4: it belongs to a transaction) with base sequence -1 holding one record whose key is
(version 0, type) and whose value is EndTxnMarker v0 (version 0, coordinator epoch)."""

from __future__ import annotations

import struct

import pytest

from tiercel.protocol.end_txn_marker import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    read_end_txn_marker,
)
from tiercel.protocol.errors import InvalidRecordError
from tiercel.protocol.record_batch import RECORD_BATCH_OVERHEAD, TimestampType, read_header
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.record_filter import empty_batch
from tiercel.protocol.records import decode_records


def test_a_commit_marker_batch_is_kafkas_layout() -> None:
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 7)
    data = build_end_txn_marker_batch(
        marker, 42, 3, base_offset=10, partition_leader_epoch=2, timestamp=1_700_000_000_000
    )
    header = read_header(data)
    assert header.is_control and header.is_transactional
    assert header.attributes == 0x30  # no codec, CreateTime
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
    assert (header.base_offset, header.last_offset, header.partition_leader_epoch) == (10, 10, 2)
    assert header.records_count == 1 and header.max_timestamp == 1_700_000_000_000
    (record,) = decode_records(data, 1, RECORD_BATCH_OVERHEAD)
    assert record.key == b"\x00\x00\x00\x01"
    assert record.value == b"\x00\x00" + struct.pack(">i", 7)
    assert read_end_txn_marker(data) == marker


def test_an_abort_marker_under_log_append_time() -> None:
    marker = EndTransactionMarker(ControlRecordType.ABORT, 0)
    data = build_end_txn_marker_batch(
        marker, 1, 0, timestamp=5, timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    header = read_header(data)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    (record,) = decode_records(data, 1, RECORD_BATCH_OVERHEAD)
    assert record.key == b"\x00\x00\x00\x00"
    assert read_end_txn_marker(data) == marker and marker.is_abort


def control_batch(key: bytes | None, value: bytes | None) -> bytes:
    return build_record_batch(
        [SimpleRecord(key, value, timestamp=0)],
        producer_id=1,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )


def test_other_control_types_are_not_markers() -> None:
    # Kafka's LEADER_CHANGE (2) and snapshot records only appear in KRaft logs.
    assert read_end_txn_marker(control_batch(b"\x00\x00\x00\x02", b"")) is None


def test_an_emptied_control_batch_is_no_marker() -> None:
    # The log cleaner keeps a removed marker's header when its producer needs the epoch
    # (Kafka's DefaultRecordBatch.writeEmptyHeader): no record, so no marker to read.
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 3)
    data = build_end_txn_marker_batch(marker, 42, 3, base_offset=10, timestamp=5)
    emptied = empty_batch(read_header(data))
    assert read_header(emptied).is_control and read_header(emptied).records_count == 0
    assert read_end_txn_marker(emptied) is None
    assert read_end_txn_marker(data) == marker


def test_a_later_marker_version_is_read_by_its_known_fields() -> None:
    value = b"\x00\x01" + struct.pack(">i", 9) + b"\x00"  # v1 adds fields after these
    marker = read_end_txn_marker(control_batch(b"\x00\x00\x00\x01", value))
    assert marker == EndTransactionMarker(ControlRecordType.COMMIT, 9)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b"\x00\x00\x00\x00\x00\x00"),
        (b"\x00\x00", b"\x00\x00\x00\x00\x00\x00"),
        (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x00"),
        (b"\x00\x00\x00\x01", None),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00"),
    ],
)
def test_unreadable_control_records_are_invalid(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(InvalidRecordError):
        read_end_txn_marker(control_batch(key, value))
