"""build_record_batch against Kafka's MemoryRecordsBuilder rules and another writer."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.protocol.compression import CompressionType, decompress
from tiercel.protocol.record_batch import RECORDS_OFFSET, TimestampType, is_crc_valid, read_header
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.records import decode_records, validate_records

RECORDS = st.lists(
    st.builds(
        SimpleRecord,
        key=st.none() | st.binary(max_size=50),
        value=st.none() | st.binary(max_size=500),
        headers=st.lists(
            st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3
        ).map(tuple),
        timestamp=st.integers(0, 2**41),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(
    RECORDS,
    st.integers(0, 2**40),
    st.integers(0, 2**40),
    st.integers(0, 2**15 - 1),
    st.integers(0, 2**31 - 1),
    st.booleans(),
)
def test_uncompressed_bytes_equal_an_independent_writer(
    records: list[SimpleRecord],
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool,
) -> None:
    theirs = DefaultRecordBatchBuilder(
        2, 0, int(transactional), producer_id, producer_epoch, base_sequence, 10**8
    )
    for offset, r in enumerate(records):
        theirs.append(offset, r.timestamp, r.key, r.value, list(r.headers))
    expected = bytearray(theirs.build())
    expected[:8] = base_offset.to_bytes(8, "big")  # aiokafka always writes baseOffset 0

    ours = build_record_batch(
        records,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )
    assert ours == expected


@settings(max_examples=40, deadline=None)
@given(RECORDS, st.sampled_from(list(CompressionType)))
def test_every_codec_round_trips(records: list[SimpleRecord], codec: CompressionType) -> None:
    batch = build_record_batch(records, compression=codec)
    header = read_header(batch)
    assert header.compression == codec and is_crc_valid(batch, 0, header)
    data = decompress(codec, memoryview(batch)[RECORDS_OFFSET:])
    validate_records(data, header.records_count)
    decoded = decode_records(data, header.records_count)
    assert [(d.key, d.value, d.headers) for d in decoded] == [
        (r.key, r.value, tuple(r.headers)) for r in records
    ]
    assert [header.base_timestamp + d.timestamp_delta for d in decoded] == [
        r.timestamp for r in records
    ]
    theirs = DefaultRecordBatch(bytearray(batch))
    assert [(r.offset, r.key, r.value) for r in theirs] == [
        (i, r.key, r.value) for i, r in enumerate(records)
    ]


def test_header_fields_follow_memory_records_builder() -> None:
    records = [SimpleRecord(b"a", b"1", timestamp=500), SimpleRecord(b"b", b"2", timestamp=900)]
    records.append(SimpleRecord(b"c", b"3", timestamp=700))
    h = read_header(build_record_batch(records, base_offset=7, partition_leader_epoch=3))
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (7, 2, 3)
    assert (h.base_timestamp, h.max_timestamp) == (500, 900)
    assert (h.partition_leader_epoch, h.magic, h.attributes) == (3, 2, 0)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)


def test_missing_timestamps_are_no_timestamp() -> None:
    batch = build_record_batch([SimpleRecord(None, b"x"), SimpleRecord(None, b"y")])
    h = read_header(batch)
    assert (h.base_timestamp, h.max_timestamp) == (-1, -1)


def test_base_timestamp_override_shifts_the_deltas() -> None:
    batch = build_record_batch([SimpleRecord(None, b"x", timestamp=1_000)], base_timestamp=400)
    h = read_header(batch)
    assert h.base_timestamp == 400
    (record,) = decode_records(batch, 1, RECORDS_OFFSET)
    assert record.timestamp_delta == 600


def test_log_append_time_batches() -> None:
    batch = build_record_batch(
        [SimpleRecord(None, b"x", timestamp=5)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=99,
    )
    h = read_header(batch)
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert (h.base_timestamp, h.max_timestamp) == (5, 99)
    with pytest.raises(ValueError, match="log_append_time"):
        build_record_batch([SimpleRecord(None, b"x")], timestamp_type=TimestampType.LOG_APPEND_TIME)


def test_flags() -> None:
    h = read_header(
        build_record_batch(
            [SimpleRecord(None, b"x")],
            producer_id=1,
            producer_epoch=0,
            is_control=True,
            is_transactional=True,
        )
    )
    assert h.is_control and h.is_transactional and h.base_sequence == -1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"is_transactional": True}, "without a valid producer ID"),
        ({"producer_id": 1, "base_sequence": 0}, "producer epoch"),
        ({"producer_id": 1, "producer_epoch": 0}, "sequence number"),
        ({"base_timestamp": -5}, "Invalid negative timestamp -5"),
    ],
)
def test_what_memory_records_builder_rejects(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_record_batch([SimpleRecord(None, b"x")], **kwargs)


def test_rejects_bad_record_timestamps_and_empty_batches() -> None:
    with pytest.raises(ValueError, match="Invalid negative timestamp -2"):
        build_record_batch([SimpleRecord(None, b"x", timestamp=-2)])
    with pytest.raises(ValueError, match="at least one record"):
        build_record_batch([])
