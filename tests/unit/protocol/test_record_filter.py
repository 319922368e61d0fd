"""scan_records and the rebuilt / empty batches of compaction, read back by our decoder
and by aiokafka's independent one."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.protocol.compression import CompressionType, decompress
from tiercel.protocol.errors import InvalidRecordError
from tiercel.protocol.record_batch import (
    NO_TIMESTAMP,
    RECORDS_OFFSET,
    RecordBatchHeader,
    TimestampType,
    is_crc_valid,
    read_header,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.record_filter import (
    empty_batch,
    rebuild_batch,
    record_timestamp,
    scan_records,
)
from tiercel.protocol.records import decode_records

RECORDS = st.lists(
    st.builds(
        SimpleRecord,
        key=st.none() | st.binary(max_size=40),
        value=st.none() | st.binary(max_size=300),
        headers=st.lists(
            st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=2
        ).map(tuple),
        timestamp=st.integers(0, 2**41),
    ),
    min_size=1,
    max_size=20,
)


def _section(batch: bytes) -> tuple[RecordBatchHeader, bytes]:
    header = read_header(batch)
    return header, bytes(decompress(header.compression, memoryview(batch)[RECORDS_OFFSET:]))


@settings(max_examples=80, deadline=None)
@given(
    RECORDS,
    st.sampled_from(list(CompressionType)),
    st.sampled_from(list(TimestampType)),
    st.data(),
)
def test_rebuilt_batch_keeps_the_header_and_the_retained_records(
    records: list[SimpleRecord],
    codec: CompressionType,
    timestamp_type: TimestampType,
    data: st.DataObject,
) -> None:
    batch = build_record_batch(
        records,
        base_offset=1000,
        compression=codec,
        timestamp_type=timestamp_type,
        log_append_time=2**41 + 5 if timestamp_type == TimestampType.LOG_APPEND_TIME else None,
        producer_id=77,
        producer_epoch=3,
        base_sequence=40,
        partition_leader_epoch=9,
    )
    header, section = _section(batch)
    scanned = scan_records(section, header.records_count)
    decoded = decode_records(section, header.records_count)
    assert [(s.offset_delta, s.timestamp_delta, s.key, s.has_value) for s in scanned] == [
        (d.offset_delta, d.timestamp_delta, d.key, d.value is not None) for d in decoded
    ]
    keep = data.draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records)))
    retained = [s for s, k in zip(scanned, keep, strict=True) if k] or scanned[-1:]
    horizon = data.draw(st.sampled_from([NO_TIMESTAMP, 2**42]))

    rebuilt = rebuild_batch(header, section, retained, horizon)

    new = read_header(rebuilt)
    assert is_crc_valid(rebuilt, 0, new) and new.size_in_bytes == len(rebuilt)
    kept_fields = (
        "base_offset",
        "last_offset_delta",
        "partition_leader_epoch",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "compression",
        "timestamp_type",
    )
    assert [getattr(new, f) for f in kept_fields] == [getattr(header, f) for f in kept_fields]
    assert new.records_count == len(retained)
    assert new.has_delete_horizon == (horizon >= 0)
    stamps = [record_timestamp(header, s) for s in retained]
    assert new.base_timestamp == (horizon if horizon >= 0 else stamps[0])
    if timestamp_type == TimestampType.CREATE_TIME:
        assert new.max_timestamp == max(stamps)
    else:
        assert new.max_timestamp == header.max_timestamp
    # aiokafka reads the same records at the same offsets with the same timestamps.
    originals = {1000 + s.offset_delta: r for s, r in zip(scanned, records, strict=True)}
    theirs = DefaultRecordBatch(bytearray(rebuilt))
    assert theirs.validate_crc()
    got = [(r.offset, r.key, r.value, r.timestamp, tuple(r.headers)) for r in theirs]
    assert got == [
        (
            1000 + s.offset_delta,
            originals[1000 + s.offset_delta].key,
            originals[1000 + s.offset_delta].value,
            record_timestamp(header, s),
            tuple(originals[1000 + s.offset_delta].headers),
        )
        for s in retained
    ]


def test_empty_batch_is_kafkas_empty_header() -> None:
    batch = build_record_batch(
        [SimpleRecord(b"k", b"v", timestamp=123), SimpleRecord(b"k", b"w", timestamp=456)],
        base_offset=50,
        compression=CompressionType.GZIP,
        producer_id=5,
        producer_epoch=1,
        base_sequence=10,
        partition_leader_epoch=2,
        is_transactional=True,
    )
    empty = empty_batch(read_header(batch))
    header = read_header(empty)
    assert len(empty) == 61 and is_crc_valid(empty, 0, header)
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (50, 1, 0)
    assert (header.base_timestamp, header.max_timestamp) == (NO_TIMESTAMP, 456)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 10)
    assert (header.partition_leader_epoch, header.compression) == (2, 0)
    assert header.is_transactional and not header.has_delete_horizon
    assert list(DefaultRecordBatch(bytearray(empty))) == []


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_scan_records_rejects_a_short_or_long_section(cut: int) -> None:
    batch = build_record_batch([SimpleRecord(b"key", b"value" * 10, timestamp=1)] * 3)
    header, section = _section(batch)
    with pytest.raises(InvalidRecordError):
        scan_records(section[:-cut], header.records_count)
    with pytest.raises(InvalidRecordError):
        scan_records(section + b"\x00" * cut, header.records_count)
    with pytest.raises(InvalidRecordError):
        scan_records(section, header.records_count + 1)
