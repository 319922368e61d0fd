"""LogValidator: checks produced batches and assigns their offsets, as Kafka does.

Validation (`validate_records`) is a pure function of the bytes and the topic config:
any thread. For a compressed batch it decompresses to walk the records, which costs; the
caller runs it in the executor when `validation_is_costly` says so. Offset assignment
(`assign_offsets`) is on the event loop: it only builds rewritten header prefixes, the
record bytes themselves are never copied (``os.writev([prefix, rest])``).

Checks, with Kafka's error for each:
- magic 2 only, exactly one batch per partition (Produce v3+)       INVALID_RECORD
- CRC-32C over attributes..end                                        CORRUPT_MESSAGE
- a batch length below the header size                                CORRUPT_MESSAGE
- a batch length beyond the data, a base offset other than 0          INVALID_RECORD
- record count = lastOffsetDelta + 1 and = the records actually there,
  offset deltas 0..n-1, every record's fields filling its length      INVALID_RECORD
- no control batches from clients                                     INVALID_RECORD
- a producer id without a sequence number                             INVALID_RECORD
- batch size over max.message.bytes                                   MESSAGE_TOO_LARGE
- batch size over segment.bytes                                       RECORD_LIST_TOO_LARGE
- an unknown compression codec (as Kafka)                             UNKNOWN_SERVER_ERROR

and record by record (Kafka's validateRecord), each failing record named in the error's
``record_errors`` (KIP-467), the batch failing as a whole:
- a record without a key on a compacted topic                          INVALID_RECORD
- a CreateTime timestamp outside message.timestamp.before/after.max.ms,
  or a LogAppendTime batch from a producer where Kafka refuses it       INVALID_TIMESTAMP
Only the extremes of the batch's timestamps are checked on the way in; records are
decoded one by one only when those fail, to name the culprits.

A topic whose compression.type names a codec stores every batch with that codec: a
batch from the producer with another one is recompressed (its records section is the
same whatever the codec, so only the payload is re-encoded, never the records).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tiercel.config.log_config import LogConfig
from tiercel.protocol.compression import CompressionType, decompress
from tiercel.protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordError,
    RecordTooLargeError,
)
from tiercel.protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    RecordBatchHeader,
    TimestampType,
    compute_crc,
    patched_header_prefix,
    patched_timestamp_prefix,
    read_header,
)
from tiercel.protocol.record_builder import recompress_batch
from tiercel.protocol.records import Record, RecordsSummary, decode_records
from tiercel.protocol.records import validate_records as walk_records
from tiercel.storage.log_values import AppendBatch, Buffer
from tiercel.storage.topic_partition import TopicPartition

# Decompressing a batch to validate it is bounded: past this, the batch is rejected
# rather than allowed to exhaust memory (a "zip bomb" produce).
MAX_DECOMPRESSED_BATCH_BYTES: Final = 128 * 1024 * 1024
# Compressed batches larger than this are validated in the executor.
COSTLY_COMPRESSED_BYTES: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class ValidatedBatch:
    view: memoryview
    header: RecordBatchHeader
    max_timestamp: int
    """From the records themselves; the header's value is corrected if it disagrees."""
    offset_delta_of_max_timestamp: int


@dataclass(frozen=True, slots=True)
class ValidatedRecords:
    batches: tuple[ValidatedBatch, ...]
    record_count: int
    size: int


def validation_is_costly(records: Buffer, config: LogConfig) -> bool:
    """True for a large batch that must be decompressed or recompressed: validate it
    off the event loop."""
    if len(records) < COSTLY_COMPRESSED_BYTES or len(records) < RECORD_BATCH_OVERHEAD:
        return False
    codec = records[ATTRIBUTES_OFFSET + 1] & COMPRESSION_CODEC_MASK
    return codec != CompressionType.NONE or _target_codec(config, codec) != codec


def _target_codec(config: LogConfig, batch_codec: int) -> int:
    """The codec a batch is stored with: the producer's, unless the topic names one."""
    if config.compression_type == "producer":
        return batch_codec
    if config.compression_type == "uncompressed":
        return CompressionType.NONE
    return CompressionType.from_name(config.compression_type)


class DecompressionBudgetExceeded(Exception):
    """Validating would decompress more than the caller allowed: do it in the executor."""


def validate_records(
    records: Buffer,
    config: LogConfig,
    now_ms: int,
    single_batch: bool = True,
    decompression_budget: int = MAX_DECOMPRESSED_BATCH_BYTES,
    topic_partition: TopicPartition | None = None,
) -> ValidatedRecords:
    """Validate produced records (one batch for Produce v3+); pure, any thread.

    A compressed batch whose records expand past ``decompression_budget`` raises
    DecompressionBudgetExceeded (when the budget is below the hard limit), so that a
    small batch of zeros is not inflated to megabytes on the event loop.
    ``topic_partition`` only names the partition in record errors, as Kafka's do."""
    view = memoryview(records)
    if len(view) == 0:
        raise InvalidRecordError("Produce requests must contain at least one record batch")
    batches: list[ValidatedBatch] = []
    count = 0
    pos = 0
    while pos < len(view):
        if single_batch and batches:
            raise InvalidRecordError(
                "Produce requests are only allowed to contain exactly one record batch"
            )
        batch, consumed = _validate_batch(
            view[pos:], config, now_ms, decompression_budget, topic_partition
        )
        batches.append(batch)
        count += batch.header.records_count
        pos += consumed
    return ValidatedRecords(tuple(batches), count, len(view))


def _validate_batch(
    view: memoryview,
    config: LogConfig,
    now_ms: int,
    decompression_budget: int,
    topic_partition: TopicPartition | None,
) -> tuple[ValidatedBatch, int]:
    """The validated first batch of ``view`` and the bytes it took up there (a
    recompressed batch has another size)."""
    batch, header = _checked_batch(view, config)
    consumed = len(batch)
    records = _records(batch, header, decompression_budget)
    summary = walk_records(records, header.records_count, 0)
    _check_records(records, header, summary, config, now_ms, topic_partition)
    target = _target_codec(config, header.compression)
    if target != header.compression:
        # compression.type names another codec: store the batch recompressed (Kafka).
        batch = memoryview(recompress_batch(header, records, CompressionType(target)))
        header = read_header(batch, 0)
    max_timestamp = header.base_timestamp + summary.max_timestamp_delta
    validated = ValidatedBatch(batch, header, max_timestamp, summary.offset_delta_of_max_timestamp)
    return validated, consumed


def _checked_batch(view: memoryview, config: LogConfig) -> tuple[memoryview, RecordBatchHeader]:
    """The first batch of ``view`` once its framing, CRC, size and header fields pass."""
    if len(view) > MAGIC_OFFSET and view[MAGIC_OFFSET] != MAGIC_V2:
        raise InvalidRecordError(
            f"Record batches with magic {view[MAGIC_OFFSET]} are not supported, only magic 2"
        )
    if len(view) < RECORD_BATCH_OVERHEAD:
        declared = int.from_bytes(view[8:12], "big", signed=True) + LOG_OVERHEAD
        if len(view) >= LOG_OVERHEAD and declared <= len(view):
            raise CorruptRecordError(
                f"Record batch size {declared} is smaller than the minimum batch overhead"
            )
        raise InvalidRecordError(
            f"Produce requests must have at least one complete record batch: "
            f"{len(view)} bytes received"
        )
    header = read_header(view, 0)
    size = header.batch_length + LOG_OVERHEAD
    if size > len(view):
        # Kafka's batch iterator finds no complete batch in the data at all.
        raise InvalidRecordError(
            f"Produce requests must have at least one complete record batch: the batch "
            f"declares {size} bytes but {len(view)} were received"
        )
    if size < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"Record batch size {size} is smaller than the minimum batch overhead"
        )
    batch = view[:size]
    if compute_crc(batch, 0, size) != header.crc:
        raise CorruptRecordError("Record batch is corrupt (CRC-32C mismatch)")
    if size > config.max_message_bytes:
        raise RecordTooLargeError(
            f"The record batch is {size} bytes, larger than max.message.bytes "
            f"({config.max_message_bytes})"
        )
    if size > config.segment_bytes:
        raise RecordBatchTooLargeError(
            f"The record batch is {size} bytes, larger than segment.bytes ({config.segment_bytes})"
        )
    _check_header_fields(header)
    return batch, header


def _check_header_fields(header: RecordBatchHeader) -> None:
    if header.base_offset != 0:
        raise InvalidRecordError(
            f"The baseOffset of the record batch should be 0, but it is {header.base_offset}"
        )
    if header.is_control:
        raise InvalidRecordError("Clients are not allowed to write control records")
    if header.records_count <= 0 or header.last_offset_delta + 1 != header.records_count:
        raise InvalidRecordError(
            f"Inconsistent batch offset range and record count: lastOffsetDelta "
            f"{header.last_offset_delta}, count {header.records_count}"
        )
    if header.has_producer_id and header.base_sequence < 0:
        raise InvalidRecordError(
            f"Invalid sequence number {header.base_sequence} in record batch with "
            f"producerId {header.producer_id}"
        )


def _records(batch: memoryview, header: RecordBatchHeader, budget: int) -> Buffer:
    """The batch's records section, decompressed."""
    if header.compression == CompressionType.NONE:
        return batch[RECORDS_OFFSET:]
    limit = min(budget, MAX_DECOMPRESSED_BATCH_BYTES)
    try:
        return decompress(header.compression, batch[RECORDS_OFFSET:], limit)
    except RecordTooLargeError:
        if limit < MAX_DECOMPRESSED_BATCH_BYTES:
            raise DecompressionBudgetExceeded() from None
        raise


def _check_records(
    records: Buffer,
    header: RecordBatchHeader,
    summary: RecordsSummary,
    config: LogConfig,
    now_ms: int,
    topic_partition: TopicPartition | None,
) -> None:
    """Kafka's LogValidator.validateRecord for every record of the batch — its key on a
    compacted topic (validateKey), else its timestamp (validateTimestamp) — then
    processRecordErrors: any failure fails the batch, naming every failing record."""
    null_keys = summary.null_key_indexes if config.compact else ()
    bad_timestamps = _timestamp_errors(records, header, summary, config, now_ms)
    if not null_keys and not bad_timestamps:
        return
    where = "" if topic_partition is None else f" in topic partition {topic_partition}"
    errors = {
        i: RecordError(i, f"Compacted topic cannot accept message without key{where}")
        for i in null_keys
    }
    invalid_timestamp = False
    for i, message in bad_timestamps.items():
        if i not in errors:
            errors[i] = RecordError(i, message)
            invalid_timestamp = True
    record_errors = [errors[i] for i in sorted(errors)]
    if invalid_timestamp:
        raise InvalidTimestampError(
            "One or more records have been rejected due to invalid timestamp",
            record_errors=record_errors,
        )
    shown = ", ".join(map(str, record_errors[:3]))
    raise InvalidRecordError(
        f"One or more records have been rejected due to {len(record_errors)} record errors "
        f"in total, and only showing the first three errors at most: [{shown}]",
        record_errors=record_errors,
    )


def _timestamp_errors(
    records: Buffer,
    header: RecordBatchHeader,
    summary: RecordsSummary,
    config: LogConfig,
    now_ms: int,
) -> dict[int, str]:
    """{batch index: why} for the records whose timestamp Kafka's validateTimestamp
    refuses. A record of a LogAppendTime batch carries the batch's max timestamp."""
    create_time_topic = config.message_timestamp_type == "CreateTime"
    if TimestampType(header.timestamp_type) is TimestampType.LOG_APPEND_TIME:
        if create_time_topic and header.max_timestamp != NO_TIMESTAMP:
            if _timestamp_valid(header.max_timestamp, config, now_ms):
                return {}
            return {
                i: _out_of_range(header.max_timestamp, i, config, now_ms)
                for i in range(header.records_count)
            }
        return {
            r.offset_delta: "Invalid timestamp type in message "
            f"{_record_str(r, header.max_timestamp)}. "
            "Producer should not set timestamp type to LogAppendTime."
            for r in decode_records(records, header.records_count)
        }
    if not create_time_topic:
        return {}
    lowest = header.base_timestamp + summary.min_timestamp_delta
    # Every timestamp lies between the extremes, NO_TIMESTAMP aside (it is never checked,
    # and when it is the lowest the others are at least 0).
    if _timestamp_valid(header.base_timestamp + summary.max_timestamp_delta, config, now_ms) and (
        _timestamp_valid(0 if lowest == NO_TIMESTAMP else lowest, config, now_ms)
    ):
        return {}
    out = {}
    for r in decode_records(records, header.records_count):
        timestamp = header.base_timestamp + r.timestamp_delta
        if timestamp != NO_TIMESTAMP and not _timestamp_valid(timestamp, config, now_ms):
            out[r.offset_delta] = _out_of_range(timestamp, r.offset_delta, config, now_ms)
    return out


def _int64(n: int) -> int:
    """``n`` wrapped to a Java long, as Kafka's arithmetic on timestamps wraps."""
    return (n + 2**63) % 2**64 - 2**63


def _timestamp_valid(timestamp: int, config: LogConfig, now_ms: int) -> bool:
    """Kafka's recordHasInvalidTimestamp, negated (in Java long arithmetic)."""
    diff = _int64(now_ms - timestamp)
    return not (
        diff > config.message_timestamp_before_max_ms
        or _int64(-diff) > config.message_timestamp_after_max_ms
    )


def _out_of_range(timestamp: int, offset: int, config: LogConfig, now_ms: int) -> str:
    low = _int64(now_ms - config.message_timestamp_before_max_ms)
    high = _int64(now_ms + config.message_timestamp_after_max_ms)
    return (
        f"Timestamp {timestamp} of message with offset {offset} is out of range. "
        f"The timestamp should be within [{low}, {high}]"
    )


def _record_str(record: Record, timestamp: int) -> str:
    """Kafka's DefaultRecord.toString, as its messages show a record (base offset 0)."""
    key = 0 if record.key is None else len(record.key)
    value = 0 if record.value is None else len(record.value)
    return (
        f"DefaultRecord(offset={record.offset_delta}, timestamp={timestamp}, "
        f"key={key} bytes, value={value} bytes)"
    )


def assign_offsets(
    validated: ValidatedRecords,
    base_offset: int,
    leader_epoch: int,
    timestamp_type: str,
    now_ms: int,
) -> tuple[list[AppendBatch], int, int]:
    """Offsets from ``base_offset`` and the leader epoch into each batch header.

    Returns (batches to write, offset of the max timestamp, log append time or -1). With
    LogAppendTime the batch's max timestamp becomes ``now_ms`` and the CRC is recomputed;
    a CreateTime batch whose header max timestamp disagrees with its records is
    corrected the same way (Kafka's ``setMaxTimestamp``)."""
    out: list[AppendBatch] = []
    offset = base_offset
    log_append = timestamp_type == "LogAppendTime"
    best_timestamp, offset_of_max = -1, base_offset
    for batch in validated.batches:
        header = batch.header
        if log_append:
            max_timestamp = now_ms
            prefix = patched_timestamp_prefix(
                batch.view, offset, leader_epoch, TimestampType.LOG_APPEND_TIME, now_ms
            )
        elif batch.max_timestamp != header.max_timestamp:
            max_timestamp = batch.max_timestamp
            prefix = patched_timestamp_prefix(
                batch.view, offset, leader_epoch, TimestampType.CREATE_TIME, max_timestamp
            )
        else:
            max_timestamp = header.max_timestamp
            prefix = patched_header_prefix(batch.view, offset, leader_epoch)
        chunks: Sequence[Buffer] = (prefix, batch.view[len(prefix) :])
        last = offset + header.last_offset_delta
        out.append(
            AppendBatch(
                chunks,
                len(batch.view),
                offset,
                last,
                max_timestamp,
                leader_epoch,
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.is_transactional,
            )
        )
        if max_timestamp > best_timestamp:
            best_timestamp = max_timestamp
            # With LogAppendTime every record carries the max: the first one is reported.
            offset_of_max = offset if log_append else offset + batch.offset_delta_of_max_timestamp
        offset = last + 1
    return out, offset_of_max, now_ms if log_append else -1
