"""Checking one producer's batches against its state before they are appended
(Kafka's `ProducerAppendInfo`).

The rules, Kafka 3.9's (KIP-360 included):

- a batch whose epoch is older than the producer's is fenced: INVALID_PRODUCER_EPOCH
  (a replicated batch is only logged: the leader already decided);
- in the producer's current epoch the batch's first sequence must follow the last one
  appended (0 follows Int32.MAX), else OUT_OF_ORDER_SEQUENCE_NUMBER;
- a newer epoch must start at sequence 0, unless the partition knows no epoch for the
  producer at all;
- a producer the partition does not know (never seen, expired, or its state lost) is
  accepted at any sequence: since KIP-360 the broker no longer answers a produce with
  UNKNOWN_PRODUCER_ID.

Transactions (KIP-98): a transactional batch of a producer with no open transaction
opens one at its first offset; a non-transactional batch while one is open is
INVALID_TXN_STATE (a replicated or replayed one is accepted: the leader decided). A
COMMIT/ABORT marker closes it: its epoch must not be older than the producer's
(INVALID_PRODUCER_EPOCH) and its coordinator epoch not older than the last marker's
(TRANSACTION_COORDINATOR_FENCED); a replicated marker is only logged, as Kafka does.

While the producer's transaction is being verified with its coordinator (KIP-890 part
1, `storage.verification_guard`), a client batch whose first sequence is above the
lowest sequence waiting for verification is OUT_OF_ORDER_SEQUENCE_NUMBER.

Recognising a retried batch is the caller's job (`ProducerStateEntry.find_duplicate_batch`),
before these checks: a retry must never be answered OUT_OF_ORDER_SEQUENCE_NUMBER.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.end_txn_marker import EndTransactionMarker
from tiercel.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from tiercel.protocol.record_batch import NO_PRODUCER_EPOCH, NO_SEQUENCE
from tiercel.storage.log_values import LogAppendInfo
from tiercel.storage.producer_state_entry import BatchMetadata, ProducerStateEntry, in_sequence
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.verification_guard import VerificationStateEntry

__all__ = ["AppendOrigin", "CompletedTxn", "ProducerAppendInfo"]

_log: Final = logging.getLogger("tiercel.producer_state")


class AppendOrigin(enum.Enum):
    """Who wrote a batch, which decides how much is checked (Kafka's AppendOrigin)."""

    CLIENT = "client"  # a producer: epoch and sequence checks
    REPLICATION = "replication"  # a follower fetch or a log replay: no checks
    COORDINATOR = "coordinator"  # a transaction marker (WriteTxnMarkers): epoch checks


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker closed: its producer, first offset, marker offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerAppendInfo:
    """The state one producer will have once the batches given to `append_data_batch`
    are appended; raises, without changing anything, if one of them is not acceptable.

    Invariants: ``current`` is never modified; `to_entry` is the state after the batches
    seen so far. Event-loop only (or a loader thread that owns the manager).
    """

    __slots__ = (
        "_current",
        "_origin",
        "_topic_partition",
        "_updated",
        "_verification",
        "producer_id",
        "started_txns",
        "wrote_transactional",
    )

    def __init__(
        self,
        topic_partition: TopicPartition,
        producer_id: int,
        current: ProducerStateEntry,
        origin: AppendOrigin,
        verification: VerificationStateEntry | None = None,
    ) -> None:
        self._topic_partition = topic_partition
        self.producer_id = producer_id
        self._current = current
        self._origin = origin
        self._verification = verification
        self._updated = current.without_batches()
        # First offsets of the transactions these batches open, in order: the manager
        # tracks them once the batches are written.
        self.started_txns: list[int] = []
        # A transactional batch or a marker: the transaction has started (or ended),
        # so its verification state is done with (Kafka's updateProducers).
        self.wrote_transactional = False

    def append_data_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        last_timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool = False,
    ) -> None:
        self._check_producer_epoch(epoch, first_offset)
        if self._origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        self._updated.add_batch(
            epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp
        )
        in_txn = self._updated.current_txn_first_offset is not None
        if in_txn and not is_transactional and self._origin is not AppendOrigin.REPLICATION:
            raise InvalidTxnStateError(
                f"Expected transactional write from producer {self.producer_id} at offset "
                f"{first_offset} in {self._topic_partition}"
            )
        if is_transactional:
            self.wrote_transactional = True
            if not in_txn:
                self._updated.current_txn_first_offset = first_offset
                self.started_txns.append(first_offset)

    def append_end_txn_marker(
        self, marker: EndTransactionMarker, epoch: int, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """Close the producer's transaction with the marker at ``offset``; the
        completed transaction, None when none was open (an empty transaction changes
        neither the LSO nor the transaction index)."""
        self._check_producer_epoch(epoch, offset)
        self._check_coordinator_epoch(marker, offset)
        self.wrote_transactional = True
        updated = self._updated
        first = updated.current_txn_first_offset
        completed = None
        if first is not None:
            completed = CompletedTxn(self.producer_id, first, offset, marker.is_abort)
        updated.maybe_update_producer_epoch(epoch)
        updated.current_txn_first_offset = None
        updated.coordinator_epoch = marker.coordinator_epoch
        updated.last_timestamp = timestamp
        return completed

    def _check_coordinator_epoch(self, marker: EndTransactionMarker, offset: int) -> None:
        if self._updated.coordinator_epoch <= marker.coordinator_epoch:
            return
        message = (
            f"Invalid coordinator epoch for producer {self.producer_id} at offset {offset} in "
            f"{self._topic_partition}: {marker.coordinator_epoch} (marker) < "
            f"{self._updated.coordinator_epoch} (last seen)"
        )
        if self._origin is AppendOrigin.REPLICATION:
            log_event(
                _log,
                logging.WARNING,
                "stale_coordinator_epoch_replicated",
                partition=str(self._topic_partition),
                producer_id=self.producer_id,
                offset=offset,
            )
            return
        raise TransactionCoordinatorFencedError(message)

    def _check_producer_epoch(self, epoch: int, offset: int) -> None:
        if epoch >= self._updated.producer_epoch:
            return
        message = (
            f"Epoch of producer {self.producer_id} at offset {offset} in "
            f"{self._topic_partition} is {epoch}, which is smaller than the last seen epoch "
            f"{self._updated.producer_epoch}"
        )
        if self._origin is AppendOrigin.REPLICATION:
            log_event(
                _log,
                logging.WARNING,
                "stale_producer_epoch_replicated",
                partition=str(self._topic_partition),
                producer_id=self.producer_id,
                offset=offset,
                epoch=epoch,
                last_epoch=self._updated.producer_epoch,
            )
            return
        raise InvalidProducerEpochError(message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        verification = self._verification
        if verification is not None and first_seq > verification.lowest_sequence:
            raise OutOfOrderSequenceNumberError(
                f"Out of order sequence number for producer {self.producer_id} at offset "
                f"{offset} in {self._topic_partition}: {first_seq} (incoming seq. number), "
                f"{verification.lowest_sequence} (earliest seen sequence)"
            )
        updated, current = self._updated, self._current
        if epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceNumberError(
                    f"Invalid sequence number for new epoch of producer {self.producer_id} "
                    f"at offset {offset} in {self._topic_partition}: {epoch} (request epoch), "
                    f"{first_seq} (seq. number), {updated.producer_epoch} (current epoch)"
                )
            return
        if not updated.is_empty:
            last_seq = updated.last_seq
        elif epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # With no epoch known (all its batches deleted, say) any sequence is accepted.
        if current.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceNumberError(
                f"Out of order sequence number for producer {self.producer_id} at offset "
                f"{offset} in {self._topic_partition}: {first_seq} (incoming seq. number), "
                f"{last_seq} (current end sequence number)"
            )

    def to_entry(self) -> ProducerStateEntry:
        return self._updated


def duplicate_append_info(
    duplicate: BatchMetadata, size: int, log_start_offset: int
) -> LogAppendInfo:
    """The answer to a client's retry of a batch already written: as Kafka, its
    original offsets, and its timestamp as log append time."""
    return LogAppendInfo(
        first_offset=duplicate.first_offset,
        last_offset=duplicate.last_offset,
        max_timestamp=duplicate.timestamp,
        offset_of_max_timestamp=duplicate.last_offset,
        log_append_time=duplicate.timestamp,
        log_start_offset=log_start_offset,
        num_messages=duplicate.offset_delta + 1,
        valid_bytes=size,
    )
