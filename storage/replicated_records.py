"""Batches a follower fetched from its leader, checked before they are appended.

The leader already assigned offsets and stamped its leader epoch into each batch, so a
follower keeps the bytes as they are (Kafka's ``appendAsFollower``: no re-validation of
the records, no offset assignment). What is checked, per batch, from its 61-byte header
(layout in `protocol.record_batch`):

- a size field of at least the header size                          CORRUPT_MESSAGE
- magic 2, CRC-32C over attributes..end                               CORRUPT_MESSAGE
- offsets that only grow: lastOffsetDelta >= 0, each batch after the
  previous one                                                        CORRUPT_MESSAGE

A fetch response may end with a partial batch (the leader cuts at the byte limit): it
is not part of the result, as Kafka's record iterator stops before it. Pure; any thread.
"""

from __future__ import annotations

from tiercel.protocol.errors import CorruptRecordError
from tiercel.protocol.record_batch import (
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    compute_crc,
    read_header,
)
from tiercel.storage.log_values import AppendBatch, Buffer


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
            )
        )
        pos += size
    return batches
