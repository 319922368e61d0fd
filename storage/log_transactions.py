"""What a partition's log does with transactions (KIP-98), beside `UnifiedLog`.

- The **last stable offset** (Kafka's UnifiedLog.lastStableOffset): the first offset of
  the oldest transaction still open, or closed by a marker the high watermark has not
  passed yet (`ProducerStateManager.first_unstable_offset`), not below the log start;
  the high watermark when there is none or it lies beyond. read_committed reads stop
  there, and ListOffsets LATEST answers it to them.
- **Completing** a transaction once its COMMIT/ABORT marker is written: an aborted one
  is added to the transaction index of the segment holding the marker, with the LSO
  at that point (Kafka's LogSegment.updateTxnIndex).
- **read_committed reads** carry the aborted transactions overlapping the returned
  batches (Kafka's LocalLog.addAbortedTransactions), so that the consumer drops them.
- The **control batch** a partition leader appends for a marker (WriteTxnMarkers,
  Kafka's AppendOrigin.COORDINATOR).

Event-loop only, as the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tiercel.config.log_config import LogConfig
from tiercel.protocol.end_txn_marker import EndTransactionMarker, build_end_txn_marker_batch
from tiercel.protocol.record_batch import TimestampType
from tiercel.storage.local_log import LocalLog
from tiercel.storage.log_values import AbortedTransaction, AppendBatch, FetchDataInfo
from tiercel.storage.producer_append_info import CompletedTxn
from tiercel.storage.producer_state import ProducerStateManager
from tiercel.storage.transaction_index import AbortedTxn

__all__ = [
    "EndTxnMarkerEntry",
    "complete_txns",
    "end_txn_marker_append_batch",
    "last_stable_offset",
    "with_aborted_transactions",
]


@dataclass(frozen=True, slots=True)
class EndTxnMarkerEntry:
    """One partition's marker to append: whose transaction, and how it ended."""

    producer_id: int
    producer_epoch: int
    marker: EndTransactionMarker


def last_stable_offset(
    producer_state: ProducerStateManager, log_start_offset: int, high_watermark: int
) -> int:
    first_unstable = producer_state.first_unstable_offset
    if first_unstable is None:
        return high_watermark
    return min(max(first_unstable, log_start_offset), high_watermark)


def complete_txns(
    producer_state: ProducerStateManager,
    completed_txns: Sequence[CompletedTxn],
    local_log: LocalLog,
) -> None:
    """Close the transactions the markers just written ended (producer state already
    updated; the markers are in the active segment), in the order of the markers: an
    aborted one is indexed with the LSO it leaves, and the index takes entries only in
    the order of their last offsets (Kafka's UnifiedLog.append, which completes the
    transactions analyzeAndValidateProducerState listed batch by batch)."""
    for completed in completed_txns:
        if completed.is_aborted:
            aborted = AbortedTxn(
                completed.producer_id,
                completed.first_offset,
                completed.last_offset,
                producer_state.last_stable_offset(completed),
            )
            with local_log.maybe_handle_io_exception("Error while updating a txn index"):
                local_log.active_segment.update_txn_index(aborted)
        producer_state.complete_txn(completed)


def with_aborted_transactions(
    local_log: LocalLog, start_offset: int, info: FetchDataInfo
) -> FetchDataInfo:
    """``info`` (a read_committed read from ``start_offset``) with its aborted
    transactions: those overlapping [start_offset, an offset past the returned batches).
    Nothing read, none listed."""
    start = info.fetch_offset_metadata
    if not info.records or start.message_offset_only:
        return FetchDataInfo(start, info.records, [])
    upper = local_log.fetch_upper_bound_offset(start, len(info.records))
    aborted = [
        AbortedTransaction(txn.producer_id, txn.first_offset)
        for txn in local_log.collect_aborted_transactions(start_offset, upper)
    ]
    return FetchDataInfo(start, info.records, aborted)


def end_txn_marker_append_batch(
    marker: EndTransactionMarker,
    producer_id: int,
    producer_epoch: int,
    base_offset: int,
    leader_epoch: int,
    config: LogConfig,
    now_ms: int,
) -> AppendBatch:
    """The control batch for ``marker`` at ``base_offset``, stamped as a leader stamps
    a produced batch (its epoch; the append time under LogAppendTime)."""
    data = build_end_txn_marker_batch(
        marker,
        producer_id,
        producer_epoch,
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        timestamp=now_ms,
        timestamp_type=(
            TimestampType.LOG_APPEND_TIME
            if config.message_timestamp_type == "LogAppendTime"
            else TimestampType.CREATE_TIME
        ),
    )
    return AppendBatch(
        (data,),
        len(data),
        base_offset,
        base_offset,
        now_ms,
        leader_epoch,
        producer_id,
        producer_epoch,
        -1,
        is_transactional=True,
        is_control=True,
        end_txn_marker=marker,
    )
