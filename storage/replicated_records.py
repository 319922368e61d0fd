"""Batches a follower fetched from its leader, checked before they are appended.

The leader already assigned offsets and stamped its leader epoch into each batch, so a
follower keeps the bytes as they are (Kafka's ``appendAsFollower``: no re-validation of
the records, no offset assignment). What is checked, per batch, from its 61-byte header
(layout in `protocol.record_batch`):

- a size field of at least the header size                          CORRUPT_MESSAGE
- magic 2, CRC-32C over attributes..end                               CORRUPT_MESSAGE
- offsets that only grow: lastOffsetDelta >= 0, each batch after the
  previous one                                                        CORRUPT_MESSAGE
- a control batch's record parses as a control record                 CORRUPT_MESSAGE
  (its COMMIT/ABORT marker then closes the producer's transaction)

A fetch response may end with a partial batch (the leader cuts at the byte limit): it
is not part of the result, as Kafka's record iterator stops before it.

The checked batches are then appended in runs that each fit one segment
(`segment_runs`). Pure; any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from tiercel.protocol.end_txn_marker import EndTransactionMarker, read_end_txn_marker
from tiercel.protocol.errors import CorruptRecordError, KafkaError, RecordBatchTooLargeError
from tiercel.protocol.record_batch import (
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    compute_crc,
    read_header,
)
from tiercel.storage.log_values import AppendBatch, Buffer, LogAppendInfo

# Index entries hold offsets relative to the segment's base offset in 32 bits.
_MAX_RELATIVE_OFFSET: Final = 2**31 - 1


class UnexpectedAppendOffsetError(Exception):
    """A follower append whose first batch starts below the log end offset (Kafka's
    UnexpectedAppendOffsetException): the caller decides whether it can recover."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


def replicated_batches(records: Buffer) -> list[AppendBatch]:
    """The whole batches of ``records`` as `AppendBatch` views (no copy), checked."""
    view = memoryview(records)
    limit = len(view)
    batches: list[AppendBatch] = []
    pos = 0
    previous_last = -1
    while limit - pos >= RECORD_BATCH_OVERHEAD:
        header = read_header(view, pos)
        size = header.batch_length + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"replicated batch at position {pos} has size {size}, smaller than the "
                f"{RECORD_BATCH_OVERHEAD}-byte header"
            )
        if pos + size > limit:
            break  # the partial batch the leader's byte limit cut
        if header.magic != MAGIC_V2:
            raise CorruptRecordError(f"replicated batch at position {pos} has magic {header.magic}")
        if compute_crc(view, pos, size) != header.crc:
            raise CorruptRecordError(
                f"replicated batch at offset {header.base_offset} fails its CRC check"
            )
        if header.last_offset_delta < 0 or header.base_offset <= previous_last:
            raise CorruptRecordError(
                f"replicated batch [{header.base_offset}, {header.last_offset}] does not "
                f"follow offset {previous_last}"
            )
        previous_last = header.last_offset
        marker: EndTransactionMarker | None = None
        if header.is_control:
            try:
                marker = read_end_txn_marker(view[pos : pos + size])
            except KafkaError as e:
                raise CorruptRecordError(
                    f"replicated control batch at offset {header.base_offset}: {e.message}"
                ) from e
        batches.append(
            AppendBatch(
                (view[pos : pos + size],),
                size,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
                header.partition_leader_epoch,
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.is_transactional,
                header.is_control,
                marker,
            )
        )
        pos += size
    return batches


def segment_runs(batches: Sequence[AppendBatch], segment_bytes: int) -> list[list[AppendBatch]]:
    """``batches`` in consecutive runs that each fit one segment: at most
    ``segment_bytes`` (a fetch may carry more; Kafka refuses such an append, splitting
    it keeps the follower going), and offsets within a 32-bit delta of the run's first
    (Kafka's LogSegment.canConvertToRelativeOffset: a compacted leader's offsets may
    jump further than one segment can index).

    RecordBatchTooLargeError for a batch larger than a segment."""
    runs: list[list[AppendBatch]] = []
    run: list[AppendBatch] = []
    run_size = 0
    for batch in batches:
        if batch.size > segment_bytes:
            raise RecordBatchTooLargeError(
                f"a {batch.size}-byte batch at offset {batch.base_offset} exceeds "
                f"segment.bytes {segment_bytes}"
            )
        if run and (
            run_size + batch.size > segment_bytes
            or batch.last_offset - run[0].base_offset > _MAX_RELATIVE_OFFSET
        ):
            runs.append(run)
            run, run_size = [], 0
        run.append(batch)
        run_size += batch.size
    if run:
        runs.append(run)
    return runs


def follower_append_info(batches: Sequence[AppendBatch], log_start_offset: int) -> LogAppendInfo:
    """What a follower's append of ``batches`` (at least one) reports."""
    first, last = batches[0], batches[-1]
    best = max(batches, key=lambda batch: batch.max_timestamp)
    return LogAppendInfo(
        first_offset=first.base_offset,
        last_offset=last.last_offset,
        max_timestamp=best.max_timestamp,
        offset_of_max_timestamp=best.last_offset,
        log_append_time=-1,
        log_start_offset=log_start_offset,
        num_messages=last.last_offset - first.base_offset + 1,
        valid_bytes=sum(batch.size for batch in batches),
    )
