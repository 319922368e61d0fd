"""RecordBatch v2 header view: layout, CRC, in-place and zero-copy rewrites, scanning."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.protocol.compression import CompressionType
from tiercel.protocol.errors import CorruptRecordError
from tiercel.protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    RecordBatchHeader,
    TimestampType,
    compute_crc,
    is_crc_valid,
    iter_batches,
    patched_header_prefix,
    patched_timestamp_prefix,
    read_header,
    read_size_prefix,
    scan_batches,
    set_base_offset,
    set_max_timestamp_and_crc,
    set_partition_leader_epoch,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TIMESTAMPS = st.integers(-1, 2**45)


def batch_of(n: int = 3, *, base_offset: int = 0, ts: int = 1_700_000_000_000, **kw: Any) -> bytes:
    records = [SimpleRecord(b"k%d" % i, b"value-%d" % i, (("h", b"x"),), ts + i) for i in range(n)]
    return build_record_batch(records, base_offset=base_offset, **kw)


def test_field_offsets_match_the_struct_layout() -> None:
    fields = ["q", "i", "i", "b", "I", "h", "i", "q", "q", "q", "h", "i", "i"]
    offsets = [
        BASE_OFFSET_OFFSET,
        BATCH_LENGTH_OFFSET,
        PARTITION_LEADER_EPOCH_OFFSET,
        MAGIC_OFFSET,
        CRC_OFFSET,
        ATTRIBUTES_OFFSET,
        LAST_OFFSET_DELTA_OFFSET,
        BASE_TIMESTAMP_OFFSET,
        MAX_TIMESTAMP_OFFSET,
        PRODUCER_ID_OFFSET,
        PRODUCER_EPOCH_OFFSET,
        BASE_SEQUENCE_OFFSET,
        RECORDS_COUNT_OFFSET,
    ]
    at = 0
    for code, offset in zip(fields, offsets, strict=True):
        assert offset == at
        at += struct.calcsize(">" + code)
    assert at == RECORDS_OFFSET == RECORD_BATCH_OVERHEAD == 61
    assert LOG_OVERHEAD == 12


def test_read_header_fields_and_properties() -> None:
    batch = batch_of(
        3,
        base_offset=100,
        compression=CompressionType.LZ4,
        producer_id=42,
        producer_epoch=7,
        base_sequence=2**31 - 2,
        partition_leader_epoch=5,
        is_transactional=True,
    )
    h = read_header(b"\xee" * 4 + batch, 4)
    assert h.base_offset == 100
    assert h.size_in_bytes == len(batch) == h.batch_length + 12
    assert h.partition_leader_epoch == 5
    assert h.magic == 2
    assert h.compression == CompressionType.LZ4
    assert h.timestamp_type is TimestampType.CREATE_TIME
    assert h.is_transactional and not h.is_control and not h.has_delete_horizon
    assert h.has_producer_id and (h.producer_id, h.producer_epoch) == (42, 7)
    assert h.last_offset_delta == 2 and h.records_count == 3
    assert (h.last_offset, h.next_offset) == (102, 103)
    assert h.base_timestamp == 1_700_000_000_000 and h.max_timestamp == 1_700_000_000_002
    # base 2^31-2 plus 2 wraps past Int32.MAX to 0, as Kafka's incrementSequence does
    assert h.last_sequence == 0
    assert read_size_prefix(batch, 0) == (100, len(batch) - 12)


def test_header_agrees_with_aiokafka() -> None:
    batch = batch_of(5, base_offset=9, compression=CompressionType.GZIP)
    theirs = DefaultRecordBatch(bytearray(batch))
    h = read_header(batch)
    assert (h.base_offset, h.crc, h.attributes, h.last_offset_delta) == (
        theirs.base_offset,
        theirs.crc,
        theirs.attributes,
        theirs.last_offset_delta,
    )
    assert (h.base_timestamp, h.max_timestamp) == (theirs.first_timestamp, theirs.max_timestamp)


def test_flag_properties() -> None:
    values = [0] * 13
    values[5] = 0x7F  # every defined attribute bit
    h = RecordBatchHeader(*values)
    assert h.compression == 7
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert h.is_transactional and h.is_control and h.has_delete_horizon
    assert h._replace(base_sequence=5, last_offset_delta=3).last_sequence == 8
    assert h._replace(base_sequence=-1, last_offset_delta=3).last_sequence == -1
    assert not h._replace(producer_id=-1).has_producer_id


@pytest.mark.parametrize("size", [0, 1, 60])
def test_read_header_needs_61_bytes(size: int) -> None:
    with pytest.raises(CorruptRecordError):
        read_header(batch_of()[:size])
    with pytest.raises(CorruptRecordError):
        read_header(batch_of(), len(batch_of()) - size)


def test_read_size_prefix_needs_12_bytes() -> None:
    with pytest.raises(CorruptRecordError):
        read_size_prefix(b"\x00" * 11, 0)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list(CompressionType)), st.data())
def test_crc_covers_exactly_attributes_to_end(codec: CompressionType, data: st.DataObject) -> None:
    batch = bytearray(batch_of(4, compression=codec))
    h = read_header(batch)
    assert is_crc_valid(batch, 0, h)
    position = data.draw(st.integers(0, len(batch) - 1))
    batch[position] ^= data.draw(st.integers(1, 255))
    still_valid = is_crc_valid(batch, 0, read_header(batch))
    # baseOffset, partitionLeaderEpoch and magic are outside the CRC; batchLength moves
    # its end; any other byte is the CRC itself or covered by it.
    if position < BATCH_LENGTH_OFFSET or PARTITION_LEADER_EPOCH_OFFSET <= position < CRC_OFFSET:
        assert still_valid
    elif position >= CRC_OFFSET:
        assert not still_valid


def test_crc_of_truncated_or_undersized_batch_is_invalid() -> None:
    batch = batch_of()
    h = read_header(batch)
    assert not is_crc_valid(batch[:-1], 0, h)
    assert not is_crc_valid(batch, 0, h._replace(batch_length=10))
    assert compute_crc(b"\x00" + batch, 1, len(batch)) == h.crc


@settings(max_examples=60, deadline=None)
@given(INT64, INT32, st.sampled_from(list(CompressionType)))
def test_offset_and_epoch_rewrites(base_offset: int, epoch: int, codec: CompressionType) -> None:
    original = batch_of(3, compression=codec)
    in_place = bytearray(original)
    set_base_offset(in_place, 0, base_offset)
    set_partition_leader_epoch(in_place, 0, epoch)
    h = read_header(in_place)
    assert (h.base_offset, h.partition_leader_epoch) == (base_offset, epoch)
    assert is_crc_valid(in_place, 0, h)
    assert in_place[21:] == original[21:]

    view = memoryview(original)
    prefix = patched_header_prefix(view, base_offset, epoch)
    assert len(prefix) == 21
    assert prefix + bytes(view[21:]) == in_place


@settings(max_examples=80, deadline=None)
@given(
    INT64,
    INT32,
    st.sampled_from(list(TimestampType)),
    TIMESTAMPS,
    st.sampled_from(list(TimestampType)),
    st.sampled_from(list(CompressionType)),
)
def test_timestamp_prefix_equals_in_place_rewrite(
    base_offset: int,
    epoch: int,
    built_type: TimestampType,
    max_timestamp: int,
    new_type: TimestampType,
    codec: CompressionType,
) -> None:
    original = batch_of(
        3, compression=codec, timestamp_type=built_type, log_append_time=1_700_000_000_500
    )
    in_place = bytearray(original)
    set_base_offset(in_place, 0, base_offset)
    set_partition_leader_epoch(in_place, 0, epoch)
    set_max_timestamp_and_crc(in_place, 0, new_type, max_timestamp)
    h = read_header(in_place)
    assert is_crc_valid(in_place, 0, h)
    assert h.timestamp_type is new_type and h.max_timestamp == max_timestamp
    assert in_place[PRODUCER_ID_OFFSET:] == original[PRODUCER_ID_OFFSET:]

    trailing = b"next batch bytes"
    view = memoryview(original + trailing)
    prefix = patched_timestamp_prefix(view, base_offset, epoch, new_type, max_timestamp)
    assert len(prefix) == PRODUCER_ID_OFFSET
    assert prefix + bytes(view[PRODUCER_ID_OFFSET : len(original)]) == in_place


def test_log_append_time_rewrite_is_what_consumers_read() -> None:
    batch = bytearray(batch_of(3))
    set_max_timestamp_and_crc(batch, 0, TimestampType.LOG_APPEND_TIME, 1_800_000_000_000)
    h = read_header(batch)
    assert h.attributes & 0x08 and h.base_timestamp == 1_700_000_000_000
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.validate_crc()
    assert [r.timestamp for r in theirs] == [1_800_000_000_000] * 3
    assert {r.timestamp_type for r in DefaultRecordBatch(bytearray(batch))} == {1}


def test_unchanged_timestamp_rewrite_leaves_the_batch_alone() -> None:
    # Kafka skips the rewrite when nothing changes, so even a wrong CRC stays as stored.
    batch = bytearray(batch_of(2))
    batch[CRC_OFFSET] ^= 0xFF
    before = bytes(batch)
    h = read_header(batch)
    set_max_timestamp_and_crc(batch, 0, TimestampType.CREATE_TIME, h.max_timestamp)
    assert batch == before
    prefix = patched_timestamp_prefix(batch, 0, -1, TimestampType.CREATE_TIME, h.max_timestamp)
    assert prefix == before[:PRODUCER_ID_OFFSET]


def test_timestamp_rewrite_clears_undefined_attribute_bits_like_kafka() -> None:
    batch = bytearray(batch_of(2))
    struct.pack_into(">h", batch, ATTRIBUTES_OFFSET, 0x0180)
    set_max_timestamp_and_crc(batch, 0, TimestampType.LOG_APPEND_TIME, 5)
    assert read_header(batch).attributes == 0x08


def test_timestamp_prefix_rejects_a_view_shorter_than_the_batch() -> None:
    batch = batch_of(2)
    with pytest.raises(CorruptRecordError):
        patched_timestamp_prefix(memoryview(batch)[:-1], 0, 0, TimestampType.LOG_APPEND_TIME, 1)
    with pytest.raises(CorruptRecordError):
        patched_header_prefix(memoryview(batch)[:20], 0, 0)


# --- concatenated batches ---------------------------------------------------------------


def concatenated(n: int) -> tuple[bytes, list[int]]:
    batches = [batch_of(i + 1, base_offset=10 * i, ts=1_000 + 100 * (i % 3)) for i in range(n)]
    positions = [sum(len(b) for b in batches[:i]) for i in range(n)]
    return b"".join(batches), positions


def test_iter_batches_walks_back_to_back_batches() -> None:
    data, positions = concatenated(4)
    found = list(iter_batches(data))
    assert [pos for pos, _ in found] == positions
    assert [h.base_offset for _, h in found] == [0, 10, 20, 30]
    assert list(iter_batches(b"")) == []
    assert [pos for pos, _ in iter_batches(data, positions[1], positions[3])] == positions[1:3]


@pytest.mark.parametrize("cut", [1, 11, 12, 60, 61, 62])
def test_iter_batches_raises_on_a_truncated_tail(cut: int) -> None:
    data, positions = concatenated(2)
    truncated = data[: positions[1] + cut]
    walked = []
    with pytest.raises(CorruptRecordError, match="Truncated"):
        for pos, _ in iter_batches(truncated):
            walked.append(pos)
    assert walked == [0]


def test_iter_batches_raises_when_the_last_batch_misses_one_byte() -> None:
    data, _ = concatenated(2)
    with pytest.raises(CorruptRecordError, match="Truncated"):
        list(iter_batches(data[:-1]))
    with pytest.raises(CorruptRecordError, match="Truncated"):
        list(iter_batches(data, 0, len(data) - 1))


def test_iter_batches_raises_on_an_undersized_length() -> None:
    data = bytearray(batch_of())
    struct.pack_into(">i", data, BATCH_LENGTH_OFFSET, 48)
    with pytest.raises(CorruptRecordError, match="smaller than"):
        list(iter_batches(data))


def test_scan_of_clean_batches() -> None:
    data, _ = concatenated(5)
    scan = scan_batches(data)
    assert scan.valid_bytes == len(data) and scan.batch_count == 5
    assert scan.invalid_position is None and scan.invalid_reason is None
    assert scan.first is not None and scan.first.base_offset == 0
    assert scan.last is not None and scan.last.base_offset == 40
    # max timestamps per batch: 1000, 1101, 1202, 1003, 1104 -> the max is the third's
    assert (scan.max_timestamp, scan.offset_of_max_timestamp) == (1202, 22)
    assert scan_batches(b"") == scan_batches(data, len(data))
    empty = scan_batches(b"")
    assert (empty.valid_bytes, empty.first, empty.max_timestamp) == (0, None, -1)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("truncate", "truncated"),
        ("short_tail", "truncated"),
        ("crc", "corrupt: stored crc"),
        ("magic", "corrupt: magic 1"),
        ("length", "corrupt: size"),
    ],
)
def test_scan_stops_at_the_first_bad_batch(damage: str, reason: str) -> None:
    data, positions = concatenated(4)
    buf = bytearray(data)
    at = positions[2]
    if damage == "truncate":
        buf = buf[: positions[3] - 1]
    elif damage == "short_tail":
        buf = buf[: at + 30]
    elif damage == "crc":
        buf[at + RECORDS_OFFSET + 3] ^= 1
    elif damage == "magic":
        buf[at + MAGIC_OFFSET] = 1
    else:
        struct.pack_into(">i", buf, at + BATCH_LENGTH_OFFSET, 10)
    scan = scan_batches(buf)
    assert scan.valid_bytes == at and scan.batch_count == 2
    assert scan.invalid_position == at
    assert scan.invalid_reason is not None and scan.invalid_reason.startswith(reason)
    assert scan.last is not None and scan.last.base_offset == 10


def test_an_end_past_the_buffer_is_the_buffer_end() -> None:
    data, positions = concatenated(2)
    short = data[: positions[1] + 65]
    scan = scan_batches(short, 0, len(data) + 100)
    assert scan.valid_bytes == positions[1]
    assert scan.invalid_reason is not None and scan.invalid_reason.startswith("truncated")
    with pytest.raises(CorruptRecordError, match="Truncated"):
        list(iter_batches(short, 0, len(data) + 100))


def test_scan_positions_are_absolute() -> None:
    data, positions = concatenated(3)
    buf = bytearray(b"\x00" * 7 + data)
    buf[7 + positions[2] + CRC_OFFSET] ^= 1
    scan = scan_batches(buf, 7 + positions[1])
    assert scan.valid_bytes == positions[2] - positions[1]
    assert scan.invalid_position == 7 + positions[2]
