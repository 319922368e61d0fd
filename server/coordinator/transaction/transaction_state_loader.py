"""Reading a __transaction_state partition back into transaction metadata (Kafka's
``TransactionStateManager.loadTransactionMetadata``).

The log is read on the event loop in ``transaction.state.log.load.buffer.size`` chunks
of whole batches; decoding runs in the executor. Later records win; a tombstone removes
its transactional id. A record this broker cannot decode is skipped and counted (one bad
record must not cost the partition's other ids their state).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.compression import decompress
from tiercel.protocol.record_batch import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, iter_batches
from tiercel.protocol.records import decode_records
from tiercel.server.coordinator.coordinator_log_replay import replay_log
from tiercel.server.coordinator.transaction.transaction_log import (
    TransactionLogValue,
    decode_key,
    decode_value,
)
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog

_log: Final = logging.getLogger("tiercel.transaction_coordinator")


@dataclass(frozen=True, slots=True)
class ParsedTxnChunk:
    """(transactional id, value or None for a tombstone) in log order, and where the
    next chunk starts."""

    records: list[tuple[str, TransactionLogValue | None]]
    next_offset: int
    skipped: int


def parse_chunk(data: bytes) -> ParsedTxnChunk:
    """Decode whole batches. Pure CPU: runs in the executor."""
    records: list[tuple[str, TransactionLogValue | None]] = []
    next_offset = -1
    skipped = 0
    for pos, header in iter_batches(data):
        next_offset = header.next_offset
        if header.is_control:
            continue
        end = pos + header.batch_length + LOG_OVERHEAD
        section = decompress(
            header.compression, memoryview(data)[pos + RECORD_BATCH_OVERHEAD : end]
        )
        for record in decode_records(section, header.records_count):
            try:
                if record.key is None:
                    raise ValueError("the record has no key")
                transactional_id = decode_key(record.key)
                if transactional_id is None:
                    skipped += 1
                    continue
                value = None if record.value is None else decode_value(record.value)
            except Exception as e:
                log_event(
                    _log,
                    logging.ERROR,
                    "transaction_record_undecodable",
                    offset=header.base_offset + record.offset_delta,
                    reason=repr(e),
                )
                skipped += 1
                continue
            records.append((transactional_id, value))
    return ParsedTxnChunk(records, next_offset, skipped)


@dataclass(slots=True)
class LoadedTxnPartition:
    """The latest value per transactional id of one partition. Event-loop only."""

    values: dict[str, TransactionLogValue] = field(default_factory=dict)
    skipped: int = 0

    def apply(self, records: list[tuple[str, TransactionLogValue | None]]) -> None:
        for transactional_id, value in records:
            if value is None:
                self.values.pop(transactional_id, None)
            else:
                self.values[transactional_id] = value


async def load_txn_partition(
    log: UnifiedLog,
    scheduler: Scheduler,
    buffer_size: int,
    still_wanted: Callable[[], bool],
) -> LoadedTxnPartition | None:
    """Read ``log`` from its start to its current end; None if ``still_wanted`` turned
    false meanwhile (the partition moved away)."""
    loaded = LoadedTxnPartition()
    return await replay_log(
        log,
        scheduler,
        buffer_size,
        still_wanted,
        parse_chunk,
        lambda chunk: loaded.apply(chunk.records),
        loaded,
    )
