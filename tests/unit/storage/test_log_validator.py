"""LogValidator: every rejection with Kafka's error, and offset/epoch/timestamp assignment."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from log_support import BASE_TS, batch_bytes, decode_batch, small_config

from tiercel.protocol.compression import CompressionType
from tiercel.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from tiercel.protocol.record_batch import (
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORDS_COUNT_OFFSET,
    TimestampType,
    compute_crc,
    is_crc_valid,
    read_header,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.log_validator import (
    COSTLY_COMPRESSED_BYTES,
    DecompressionBudgetExceeded,
    assign_offsets,
    validate_records,
    validation_is_costly,
)

CONFIG = small_config(segment_bytes=1 << 20)
NOW = BASE_TS


def resealed(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed, so that only the edited field is wrong."""
    out = bytearray(batch)
    struct.pack_into(">I", out, CRC_OFFSET, compute_crc(out, 0, len(out)))
    return bytes(out)


def patched(batch: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, offset, value)
    return resealed(out)


def written(batches: list[object]) -> bytes:
    """The bytes `os.writev` would write for assigned batches."""
    return b"".join(bytes(chunk) for batch in batches for chunk in batch.chunks)  # type: ignore[attr-defined]


# -- accepted batches ------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(CompressionType))
def test_valid_batch_summary(codec: CompressionType) -> None:
    stamps = [NOW - 5, NOW - 1, NOW - 3]
    raw = batch_bytes([b"a", b"bb", b"ccc"], stamps, codec)
    validated = validate_records(raw, CONFIG, NOW)
    assert validated.record_count == 3
    assert validated.size == len(raw)
    (batch,) = validated.batches
    assert bytes(batch.view) == raw
    assert batch.max_timestamp == NOW - 1
    assert batch.offset_delta_of_max_timestamp == 1


def test_several_batches_allowed_only_when_asked() -> None:
    raw = batch_bytes([b"a"]) + batch_bytes([b"b", b"c"])
    with pytest.raises(InvalidRecordError, match="exactly one record batch"):
        validate_records(raw, CONFIG, NOW)
    validated = validate_records(raw, CONFIG, NOW, single_batch=False)
    assert validated.record_count == 3
    assert len(validated.batches) == 2


def test_empty_records_are_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        validate_records(b"", CONFIG, NOW)


# -- rejections ----------------------------------------------------------------------


def test_crc_mismatch_is_corrupt_message() -> None:
    raw = bytearray(batch_bytes([b"value"]))
    raw[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_records(raw, CONFIG, NOW)
    assert CorruptRecordError.error_code is ErrorCode.corrupt_message


def test_crc_covers_the_header_fields_after_it() -> None:
    raw = bytearray(batch_bytes([b"value"]))
    raw[MAX_TIMESTAMP_OFFSET + 7] ^= 0x01  # max timestamp, inside the CRC
    with pytest.raises(CorruptRecordError):
        validate_records(raw, CONFIG, NOW)


def test_batch_length_beyond_the_data_is_invalid_record() -> None:
    # Kafka's batch iterator finds no complete batch: INVALID_RECORD, not CORRUPT_MESSAGE
    raw = batch_bytes([b"value"])
    with pytest.raises(InvalidRecordError):
        validate_records(raw[:-3], CONFIG, NOW)
    with pytest.raises(InvalidRecordError):
        validate_records(patched(raw, BATCH_LENGTH_OFFSET, ">i", len(raw)), CONFIG, NOW)


def test_batch_length_below_the_header_is_corrupt() -> None:
    raw = batch_bytes([b"value"])
    with pytest.raises(CorruptRecordError):
        validate_records(patched(raw, BATCH_LENGTH_OFFSET, ">i", 40), CONFIG, NOW)


def test_client_base_offset_must_be_zero() -> None:
    raw = build_record_batch([SimpleRecord(b"k", b"v")], base_offset=5)
    with pytest.raises(InvalidRecordError, match="baseOffset"):
        validate_records(raw, CONFIG, NOW)


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_invalid_record(magic: int) -> None:
    raw = bytearray(batch_bytes([b"value"]))
    raw[MAGIC_OFFSET] = magic
    with pytest.raises(InvalidRecordError, match="magic"):
        validate_records(raw, CONFIG, NOW)
    assert InvalidRecordError.error_code is ErrorCode.invalid_record


def test_record_count_larger_than_last_offset_delta_is_invalid() -> None:
    raw = patched(batch_bytes([b"a", b"b"]), RECORDS_COUNT_OFFSET, ">i", 3)
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta"):
        validate_records(raw, CONFIG, NOW)


def test_last_offset_delta_lie_is_invalid() -> None:
    raw = patched(batch_bytes([b"a", b"b"]), LAST_OFFSET_DELTA_OFFSET, ">i", 5)
    with pytest.raises(InvalidRecordError):
        validate_records(raw, CONFIG, NOW)


def test_count_and_delta_agreeing_on_a_lie_is_invalid() -> None:
    raw = bytearray(batch_bytes([b"a", b"b"]))
    struct.pack_into(">i", raw, LAST_OFFSET_DELTA_OFFSET, 2)
    struct.pack_into(">i", raw, RECORDS_COUNT_OFFSET, 3)
    with pytest.raises(InvalidRecordError):
        validate_records(resealed(raw), CONFIG, NOW)
    struct.pack_into(">i", raw, LAST_OFFSET_DELTA_OFFSET, 0)
    struct.pack_into(">i", raw, RECORDS_COUNT_OFFSET, 1)
    with pytest.raises(InvalidRecordError):
        validate_records(resealed(raw), CONFIG, NOW)


def test_zero_records_is_invalid() -> None:
    raw = bytearray(batch_bytes([b"a"]))
    struct.pack_into(">i", raw, LAST_OFFSET_DELTA_OFFSET, -1)
    struct.pack_into(">i", raw, RECORDS_COUNT_OFFSET, 0)
    with pytest.raises(InvalidRecordError):
        validate_records(resealed(raw), CONFIG, NOW)


def test_compressed_count_lie_is_invalid() -> None:
    raw = bytearray(batch_bytes([b"a", b"b"], compression=CompressionType.GZIP))
    struct.pack_into(">i", raw, LAST_OFFSET_DELTA_OFFSET, 2)
    struct.pack_into(">i", raw, RECORDS_COUNT_OFFSET, 3)
    with pytest.raises(InvalidRecordError):
        validate_records(resealed(raw), CONFIG, NOW)


def test_batch_over_max_message_bytes_is_record_too_large() -> None:
    raw = batch_bytes([b"x" * 200])
    config = small_config(max_message_bytes=len(raw) - 1, segment_bytes=1 << 20)
    with pytest.raises(RecordTooLargeError):
        validate_records(raw, config, NOW)
    validate_records(raw, small_config(max_message_bytes=len(raw)), NOW)
    assert RecordTooLargeError.error_code is ErrorCode.message_too_large


def test_batch_over_segment_bytes_is_record_batch_too_large() -> None:
    raw = batch_bytes([b"x" * 200])
    config = small_config(segment_bytes=len(raw) - 1, max_message_bytes=1 << 20)
    with pytest.raises(RecordBatchTooLargeError):
        validate_records(raw, config, NOW)
    assert RecordBatchTooLargeError.error_code is ErrorCode.record_list_too_large


def test_timestamp_too_old_or_too_new_is_invalid_timestamp() -> None:
    config = small_config(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=500)
    validate_records(batch_bytes([b"a", b"b"], [NOW - 1000, NOW + 500]), config, NOW)
    with pytest.raises(InvalidTimestampError):
        validate_records(batch_bytes([b"a", b"b"], [NOW, NOW - 1001]), config, NOW)
    with pytest.raises(InvalidTimestampError):
        validate_records(batch_bytes([b"a", b"b"], [NOW + 501, NOW]), config, NOW)
    # a compressed batch is checked record by record too
    with pytest.raises(InvalidTimestampError):
        validate_records(
            batch_bytes([b"a", b"b"], [NOW, NOW - 5000], CompressionType.LZ4), config, NOW
        )
    assert InvalidTimestampError.error_code is ErrorCode.invalid_timestamp


def test_no_timestamp_and_log_append_time_topics_skip_the_check() -> None:
    config = small_config(message_timestamp_before_max_ms=10, message_timestamp_after_max_ms=10)
    validate_records(build_record_batch([SimpleRecord(b"k", b"v")]), config, NOW)
    old = batch_bytes([b"a"], [NOW - 10**9])
    append_time = small_config(
        message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=10
    )
    validate_records(old, append_time, NOW)


def test_null_key_on_compacted_topic_is_invalid() -> None:
    raw = build_record_batch([SimpleRecord(b"k", b"v"), SimpleRecord(None, b"v")])
    validate_records(raw, CONFIG, NOW)
    compacted = small_config(cleanup_policy=("compact",))
    with pytest.raises(InvalidRecordError, match="without key"):
        validate_records(raw, compacted, NOW)
    keyed = build_record_batch([SimpleRecord(b"k", b"v")], compression=CompressionType.ZSTD)
    validate_records(keyed, compacted, NOW)


def test_control_batch_from_a_client_is_invalid() -> None:
    raw = build_record_batch([SimpleRecord(b"\x00\x00\x00\x00", b"x")], is_control=True)
    with pytest.raises(InvalidRecordError, match="control"):
        validate_records(raw, CONFIG, NOW)


def test_malformed_record_is_invalid() -> None:
    raw = bytearray(batch_bytes([b"abc", b"def"]))
    raw[-1 - 3 - 1] = 0x08  # the last value's length varint (before 3 bytes and 0 headers): 4
    with pytest.raises(InvalidRecordError):
        validate_records(resealed(raw), CONFIG, NOW)


@given(st.binary(min_size=0, max_size=200))
@settings(max_examples=150, deadline=None)
def test_arbitrary_bytes_fail_with_a_kafka_error(data: bytes) -> None:
    """Garbage never escapes as anything but a Kafka error (mapped to an error code)."""
    with pytest.raises(KafkaError):
        validate_records(data, CONFIG, NOW)


@given(st.integers(min_value=0, max_value=200), st.data())
@settings(max_examples=100, deadline=None)
def test_any_single_byte_flip_is_rejected_or_harmless(position: int, data: st.DataObject) -> None:
    raw = bytearray(batch_bytes([b"first", b"second"], [NOW, NOW + 1]))
    position %= len(raw)
    raw[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    # partitionLeaderEpoch is outside the CRC and the broker overwrites it; every other
    # change (the base offset must be 0, the rest is under the CRC) must be caught.
    if PARTITION_LEADER_EPOCH_OFFSET <= position < MAGIC_OFFSET:
        validate_records(raw, CONFIG, NOW)
    else:
        with pytest.raises(KafkaError):
            validate_records(raw, CONFIG, NOW)


# -- assign_offsets --------------------------------------------------------------------


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.SNAPPY])
def test_assign_offsets_stamps_offsets_and_epoch_without_touching_the_crc(
    codec: CompressionType,
) -> None:
    raw = batch_bytes([b"a"]) + batch_bytes([b"b", b"c", b"d"], [NOW, NOW + 7, NOW + 2], codec)
    validated = validate_records(raw, CONFIG, NOW, single_batch=False)
    batches, offset_of_max, append_time = assign_offsets(validated, 100, 9, "CreateTime", NOW)
    assert [(b.base_offset, b.last_offset) for b in batches] == [(100, 100), (101, 103)]
    assert [b.partition_leader_epoch for b in batches] == [9, 9]
    assert offset_of_max == 102
    assert append_time == -1
    data = written(batches)
    assert len(data) == len(raw) == sum(b.size for b in batches)
    first = read_header(data, 0)
    second = read_header(data, first.size_in_bytes)
    assert (first.base_offset, second.base_offset) == (100, 101)
    assert first.partition_leader_epoch == second.partition_leader_epoch == 9
    assert is_crc_valid(data, 0, first) and is_crc_valid(data, first.size_in_bytes, second)
    # only the 12 bytes outside the CRC changed
    assert data[first.size_in_bytes + 21 :] == raw[first.size_in_bytes + 21 :]
    assert [r.offset for r in decode_batch(data[first.size_in_bytes :])] == [101, 102, 103]


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
def test_log_append_time_rewrites_max_timestamp_and_crc(codec: CompressionType) -> None:
    raw = batch_bytes([b"a", b"b"], [NOW - 50, NOW - 40], codec)
    validated = validate_records(raw, small_config(message_timestamp_type="LogAppendTime"), NOW)
    now = NOW + 12345
    batches, offset_of_max, append_time = assign_offsets(validated, 7, 3, "LogAppendTime", now)
    assert append_time == now
    assert batches[0].max_timestamp == now
    data = written(batches)
    header = read_header(data, 0)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == now
    assert header.base_timestamp == NOW - 50  # records keep their create times
    assert is_crc_valid(data, 0, header)  # a consumer's CRC check passes
    assert [(r.offset, r.timestamp) for r in decode_batch(data)] == [(7, now), (8, now)]
    # Every record carries the max timestamp: the first one is reported, as ListOffsets -3
    # (Log.fetch_max_timestamp) reports it.
    assert offset_of_max == 7


def test_create_time_batch_with_a_wrong_header_max_timestamp_is_corrected() -> None:
    raw = patched(batch_bytes([b"a", b"b"], [NOW, NOW + 30]), MAX_TIMESTAMP_OFFSET, ">q", NOW)
    validated = validate_records(raw, CONFIG, NOW)
    assert validated.batches[0].header.max_timestamp == NOW
    assert validated.batches[0].max_timestamp == NOW + 30
    batches, offset_of_max, _ = assign_offsets(validated, 0, 1, "CreateTime", NOW)
    data = written(batches)
    header = read_header(data, 0)
    assert header.max_timestamp == NOW + 30
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert is_crc_valid(data, 0, header)
    assert batches[0].max_timestamp == NOW + 30
    assert offset_of_max == 1


def test_validation_is_costly_only_for_large_compressed_batches() -> None:
    rng = random.Random(7)
    values = [rng.randbytes(1000) for _ in range(100)]  # incompressible
    plain = batch_bytes(values)
    assert len(plain) > COSTLY_COMPRESSED_BYTES
    assert not validation_is_costly(plain, CONFIG)
    packed = batch_bytes(values, compression=CompressionType.GZIP)
    assert len(packed) > COSTLY_COMPRESSED_BYTES
    assert validation_is_costly(packed, CONFIG)
    assert not validation_is_costly(
        batch_bytes(values[:10], compression=CompressionType.GZIP), CONFIG
    )


def test_a_small_batch_that_expands_a_lot_exceeds_the_loop_budget() -> None:
    zeros = build_record_batch(
        [SimpleRecord(b"k", bytes(4 * 1024 * 1024), timestamp=NOW)],
        compression=CompressionType.ZSTD,
    )
    assert len(zeros) < 4096  # cheap-looking on the wire
    config = small_config(segment_bytes=1 << 30)
    with pytest.raises(DecompressionBudgetExceeded):
        validate_records(zeros, config, NOW, decompression_budget=1024 * 1024)
    # With the whole budget (in the executor) it is a valid batch.
    assert validate_records(zeros, config, NOW).record_count == 1
