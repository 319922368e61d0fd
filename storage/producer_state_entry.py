"""What a partition remembers of one idempotent producer (Kafka's `ProducerStateEntry`).

For every producer id: its epoch and the metadata of its last five batches
(`BatchMetadata`: sequence range, offsets, timestamp), enough to recognise a retried
batch among the five a client may have in flight (``max.in.flight.requests.per.connection``
is at most 5 with idempotence) and answer it with the offsets it was first written at.

Sequence numbers are int32 and wrap from Int32.MAX to 0, as Kafka's do.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.record_batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_TIMESTAMP

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "BatchMetadata",
    "ProducerStateEntry",
    "decrement_sequence",
    "in_sequence",
    "last_sequence",
]

NUM_BATCHES_TO_RETAIN: Final = 5
INT32_MAX: Final = 2**31 - 1


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` on the int32 ring sequences live on."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def last_sequence(base_sequence: int, offset_delta: int) -> int:
    """The sequence of a batch's last record: ``base + delta``, wrapping past Int32.MAX."""
    if base_sequence > INT32_MAX - offset_delta:
        return offset_delta - (INT32_MAX - base_sequence) - 1
    return base_sequence + offset_delta


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """True if ``next_seq`` directly follows ``last_seq`` (0 follows Int32.MAX)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer: its last sequence, last offset, the distance from
    its first to its last offset (= records - 1), and its max timestamp.

    A value; safe anywhere.
    """

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """The state of one producer id on one partition.

    Invariants: ``batch_metadata`` holds at most NUM_BATCHES_TO_RETAIN batches, oldest
    first, all of epoch ``producer_epoch`` (a new epoch clears them); ``last_timestamp``
    is the max timestamp of the producer's latest batch (what expiration measures from).
    ``coordinator_epoch`` and ``current_txn_first_offset`` belong to transactions; they
    are kept as read from snapshots so that the snapshot format round-trips.

    Event-loop only (owned by one `ProducerStateManager`).
    """

    __slots__ = (
        "batch_metadata",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
        "producer_epoch",
        "producer_id",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        coordinator_epoch: int = -1,
        last_timestamp: int = NO_TIMESTAMP,
        current_txn_first_offset: int | None = None,
        batch: BatchMetadata | None = None,
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batch_metadata: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        if batch is not None:
            self.batch_metadata.append(batch)

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def without_batches(self) -> ProducerStateEntry:
        """A copy with the same epochs, timestamp and transaction but no batches: what an
        append starts from (Kafka's ``withProducerIdAndBatchMetadata(id, empty)``)."""
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )

    def add_batch(
        self,
        producer_epoch: int,
        last_seq: int,
        last_offset: int,
        offset_delta: int,
        timestamp: int,
    ) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        """Move to ``producer_epoch``, forgetting the batches of the old one."""
        if self.producer_epoch == producer_epoch:
            return False
        self.batch_metadata.clear()
        self.producer_epoch = producer_epoch
        return True

    def update(self, next_entry: ProducerStateEntry) -> None:
        """Merge the outcome of an append (``next_entry``, built by `without_batches`
        and `add_batch`) into this entry."""
        self.maybe_update_producer_epoch(next_entry.producer_epoch)
        self.batch_metadata.extend(next_entry.batch_metadata)
        self.coordinator_epoch = next_entry.coordinator_epoch
        self.current_txn_first_offset = next_entry.current_txn_first_offset
        self.last_timestamp = next_entry.last_timestamp

    def find_duplicate_batch(
        self, producer_epoch: int, base_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The cached batch of this epoch with exactly this sequence range, if any."""
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batch_metadata:
            if batch.last_seq == last_seq and batch.first_seq == base_seq:
                return batch
        return None

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, "
            f"producer_epoch={self.producer_epoch}, last_timestamp={self.last_timestamp}, "
            f"batches={list(self.batch_metadata)})"
        )
