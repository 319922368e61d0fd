"""Helpers shared by the UnifiedLog / LogSegment / loader / manager tests: building, appending and
reading back batches, and opening a partition directory the way the LogManager does."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tiercel.config.log_config import LogConfig
from tiercel.protocol.compression import CompressionType, decompress
from tiercel.protocol.end_txn_marker import ControlRecordType, EndTransactionMarker
from tiercel.protocol.record_batch import RECORDS_OFFSET, TimestampType, read_header
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.records import decode_records
from tiercel.storage.log_loader import load_partition_dir
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.log_transactions import end_txn_marker_append_batch
from tiercel.storage.log_validator import validate_records
from tiercel.storage.log_values import LogAppendInfo
from tiercel.storage.producer_append_info import AppendOrigin
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog

# Far enough in the past to be an old segment, recent enough for the default
# message.timestamp.before.max.ms (unbounded) and after.max.ms.
BASE_TS = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class Stored:
    """One record as read back from the log."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def small_config(**overrides: object) -> LogConfig:
    """A config that rolls and indexes often: 1 KiB segments, an entry per ~100 bytes; no
    time retention (the test timestamps are old) and no delay before deleting files."""
    values: dict[str, object] = {
        "segment_bytes": 1024,
        "retention_ms": -1,
        "index_interval_bytes": 100,
        "file_delete_delay_ms": 0,
        "message_timestamp_after_max_ms": 2**62,
    }
    values.update(overrides)
    return LogConfig(**values)  # type: ignore[arg-type]


def records(values: Sequence[bytes], timestamps: Sequence[int] | None = None) -> list[SimpleRecord]:
    stamps = timestamps if timestamps is not None else [BASE_TS] * len(values)
    return [SimpleRecord(b"k" + v[:4], v, timestamp=t) for v, t in zip(values, stamps, strict=True)]


def batch_bytes(
    values: Sequence[bytes],
    timestamps: Sequence[int] | None = None,
    compression: CompressionType = CompressionType.NONE,
) -> bytes:
    return build_record_batch(records(values, timestamps), compression=compression)


def produce(
    log: UnifiedLog,
    values: Sequence[bytes],
    timestamps: Sequence[int] | None = None,
    *,
    epoch: int = 0,
    compression: CompressionType = CompressionType.NONE,
    now_ms: int | None = None,
) -> LogAppendInfo:
    """Validate one batch against the log's config and append it as leader."""
    now = now_ms if now_ms is not None else BASE_TS
    validated = validate_records(batch_bytes(values, timestamps, compression), log.config, now)
    return log.append_as_leader(validated, epoch, now)


def decode_batch(data: bytes) -> list[Stored]:
    header = read_header(data, 0)
    body = decompress(header.compression, memoryview(data)[RECORDS_OFFSET : header.size_in_bytes])
    out = []
    for record in decode_records(body, header.records_count):
        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
            timestamp = header.max_timestamp
        else:
            timestamp = header.base_timestamp + record.timestamp_delta
        out.append(
            Stored(header.base_offset + record.offset_delta, timestamp, record.key, record.value)
        )
    return out


def decode_all(data: bytes) -> list[Stored]:
    """Every record of whole batches back to back (a trailing partial batch is ignored)."""
    out: list[Stored] = []
    pos = 0
    while pos + RECORDS_OFFSET <= len(data):
        size = read_header(data, pos).size_in_bytes
        if pos + size > len(data):
            break
        out.extend(decode_batch(data[pos : pos + size]))
        pos += size
    return out


def segment_records(segment: LogSegment) -> list[Stored]:
    out: list[Stored] = []
    for batch in segment.batches_from(0):
        out.extend(decode_batch(segment.read_batch(batch)))
    return out


def log_records(log: UnifiedLog) -> list[Stored]:
    return [record for segment in log.segments for record in segment_records(segment)]


def partition_dir(root: str | os.PathLike[str], topic: str = "t", partition: int = 0) -> str:
    path = os.path.join(os.fspath(root), f"{topic}-{partition}")
    os.makedirs(path, exist_ok=True)
    return path


def open_log(
    directory: str,
    config: LogConfig,
    scheduler: Scheduler,
    *,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    clean_shutdown: bool = True,
) -> UnifiedLog:
    """Load (recovering as needed) and open a partition directory, as the LogManager does."""
    loaded = load_partition_dir(directory, config, recovery_point, log_start_offset, clean_shutdown)
    return UnifiedLog(
        loaded.directory,
        loaded.topic_partition,
        config,
        loaded.segments,
        loaded.log_start_offset,
        loaded.recovery_point,
        loaded.leader_epoch_cache,
        scheduler,
        loaded.topic_id,
        loaded.producer_state,
    )


def brute_force_positions(segment: LogSegment) -> dict[int, int]:
    """last offset -> position of every batch of the segment, from a full scan."""
    return {b.header.last_offset: b.position for b in segment.batches_from(0)}


# -- transactions ------------------------------------------------------------------------

# Transactional records are stamped "now": the tests' logs keep the default retention.
NOW = int(time.time() * 1000)


class Producers:
    """Sequence numbers per producer, as idempotent clients keep them."""

    def __init__(self) -> None:
        self.next_seq: dict[int, int] = {}

    def send(
        self,
        log: UnifiedLog,
        producer_id: int,
        count: int = 1,
        *,
        epoch: int = 0,
        transactional: bool = True,
        key: bytes = b"k",
    ) -> tuple[int, int]:
        seq = self.next_seq.get(producer_id, 0)
        records = [
            SimpleRecord(key, b"p%d-%d" % (producer_id, seq + i), timestamp=NOW)
            for i in range(count)
        ]
        data = build_record_batch(
            records,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=transactional,
        )
        info = log.append_as_leader(validate_records(data, log.config, NOW), 0, NOW)
        self.next_seq[producer_id] = seq + count
        return info.first_offset, info.last_offset


def end_txn(
    log: UnifiedLog,
    producer_id: int,
    control: ControlRecordType,
    *,
    epoch: int = 0,
    coordinator_epoch: int = 0,
) -> int:
    """Append a marker as WriteTxnMarkers does (AppendOrigin.COORDINATOR); its offset."""
    offset = log.log_end_offset
    batch = end_txn_marker_append_batch(
        EndTransactionMarker(control, coordinator_epoch),
        producer_id,
        epoch,
        offset,
        0,
        log.config,
        NOW,
    )
    log.append([batch], AppendOrigin.COORDINATOR)
    return offset
