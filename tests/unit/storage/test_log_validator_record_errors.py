"""LogValidator's record-level errors (KIP-467): the records Kafka's validateRecord
refuses — a missing key on a compacted topic, an invalid timestamp — are named with
their batch index and Kafka's messages, and the batch fails as a whole."""

from __future__ import annotations

import pytest
from log_support import BASE_TS, small_config

from tiercel.protocol.compression import CompressionType
from tiercel.protocol.errors import (
    ErrorCode,
    InvalidRecordError,
    InvalidTimestampError,
    RecordError,
)
from tiercel.protocol.record_batch import TimestampType
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.log_validator import validate_records
from tiercel.storage.topic_partition import TopicPartition

NOW = BASE_TS
TP = TopicPartition("t", 0)
COMPACTED = small_config(cleanup_policy=("compact",), segment_bytes=1 << 20)
NO_KEY = "Compacted topic cannot accept message without key in topic partition t-0"
LONG_MAX = 2**63 - 1


def keyed(*keys: bytes | None, compression: CompressionType = CompressionType.NONE) -> bytes:
    return build_record_batch(
        [SimpleRecord(k, b"v", timestamp=NOW) for k in keys], compression=compression
    )


def timed(*timestamps: int, key: bytes | None = b"k") -> bytes:
    return build_record_batch([SimpleRecord(key, b"v", timestamp=t) for t in timestamps])


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4])
def test_a_keyless_record_on_a_compacted_topic_is_named(codec: CompressionType) -> None:
    with pytest.raises(InvalidRecordError) as raised:
        validate_records(
            keyed(b"a", b"b", None, b"d", compression=codec), COMPACTED, NOW, topic_partition=TP
        )
    error = raised.value
    assert error.error_code is ErrorCode.invalid_record
    assert error.record_errors == (RecordError(2, NO_KEY),)
    assert error.message == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=2, message='{NO_KEY}')]"
    )


def test_every_keyless_record_is_named_and_the_message_shows_three() -> None:
    with pytest.raises(InvalidRecordError) as raised:
        validate_records(keyed(None, b"b", None, None, None), COMPACTED, NOW, topic_partition=TP)
    assert [e.batch_index for e in raised.value.record_errors] == [0, 2, 3, 4]
    assert "due to 4 record errors in total" in raised.value.message
    assert raised.value.message.count("RecordError(") == 3


def test_keyless_records_are_fine_on_a_topic_that_is_not_compacted() -> None:
    validate_records(keyed(None, None), small_config(), NOW, topic_partition=TP)


def test_invalid_timestamps_are_named_with_kafkas_message() -> None:
    config = small_config(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=500)
    with pytest.raises(InvalidTimestampError) as raised:
        validate_records(timed(NOW, NOW - 1001, NOW + 500, NOW + 501), config, NOW)
    error = raised.value
    assert error.error_code is ErrorCode.invalid_timestamp
    assert error.message == "One or more records have been rejected due to invalid timestamp"
    window = f"[{NOW - 1000}, {NOW + 500}]"
    assert error.record_errors == (
        RecordError(
            1,
            f"Timestamp {NOW - 1001} of message with offset 1 is out of range. "
            f"The timestamp should be within {window}",
        ),
        RecordError(
            3,
            f"Timestamp {NOW + 501} of message with offset 3 is out of range. "
            f"The timestamp should be within {window}",
        ),
    )


def test_the_window_is_printed_in_java_long_arithmetic() -> None:
    """now + Long.MAX wraps in Kafka's message, as Java's long addition does."""
    config = small_config(
        message_timestamp_before_max_ms=0, message_timestamp_after_max_ms=LONG_MAX
    )
    with pytest.raises(InvalidTimestampError) as raised:
        validate_records(timed(NOW - 1), config, NOW)
    message = raised.value.record_errors[0].message
    assert message is not None and message.endswith(f"[{NOW}, {NOW + LONG_MAX - 2**64}]")


def test_a_missing_key_comes_before_the_timestamp_and_any_bad_timestamp_wins() -> None:
    config = small_config(
        cleanup_policy=("compact",),
        message_timestamp_before_max_ms=1000,
        message_timestamp_after_max_ms=500,
    )
    records = [
        SimpleRecord(None, b"v", timestamp=NOW - 5000),  # keyless and too old: the key
        SimpleRecord(b"k", b"v", timestamp=NOW),
        SimpleRecord(b"k", b"v", timestamp=NOW - 5000),
    ]
    with pytest.raises(InvalidTimestampError) as raised:
        validate_records(build_record_batch(records), config, NOW, topic_partition=TP)
    errors = raised.value.record_errors
    assert [e.batch_index for e in errors] == [0, 2]
    assert errors[0].message == NO_KEY
    assert errors[1].message is not None and errors[1].message.startswith("Timestamp ")


def test_records_without_timestamp_are_not_checked_but_the_others_are() -> None:
    config = small_config(message_timestamp_before_max_ms=1000)
    validate_records(timed(-1, NOW, -1), config, NOW)
    validate_records(timed(-1, -1), config, NOW)
    # The lowest timestamp is "none": the next lowest is still checked.
    with pytest.raises(InvalidTimestampError) as raised:
        validate_records(timed(-1, NOW - 5000, NOW), config, NOW)
    assert [e.batch_index for e in raised.value.record_errors] == [1]


def log_append_time_batch(max_timestamp: int) -> bytes:
    records = [SimpleRecord(b"k", b"value", timestamp=NOW), SimpleRecord(None, b"v", timestamp=NOW)]
    return build_record_batch(
        records, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=max_timestamp
    )


def test_a_log_append_time_batch_from_a_producer_on_a_log_append_time_topic() -> None:
    config = small_config(message_timestamp_type="LogAppendTime")
    with pytest.raises(InvalidTimestampError) as raised:
        validate_records(log_append_time_batch(NOW), config, NOW)
    suffix = ". Producer should not set timestamp type to LogAppendTime."
    assert raised.value.record_errors == (
        RecordError(
            0,
            "Invalid timestamp type in message DefaultRecord(offset=0, "
            f"timestamp={NOW}, key=1 bytes, value=5 bytes){suffix}",
        ),
        RecordError(
            1,
            "Invalid timestamp type in message DefaultRecord(offset=1, "
            f"timestamp={NOW}, key=0 bytes, value=1 bytes){suffix}",
        ),
    )


def test_a_log_append_time_batch_on_a_create_time_topic_is_checked_by_its_time() -> None:
    config = small_config(message_timestamp_before_max_ms=1000)
    validate_records(log_append_time_batch(NOW - 10), config, NOW)
    with pytest.raises(InvalidTimestampError) as raised:
        validate_records(log_append_time_batch(NOW - 5000), config, NOW)
    assert [e.batch_index for e in raised.value.record_errors] == [0, 1]
