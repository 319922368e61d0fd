"""TransactionMetadata: the state of one transactional id, and its legal transitions.

Kafka's ``TransactionMetadata`` / ``TransactionState`` (KIP-98) with the transaction
version 0/1 rules (no KIP-890 part 2 epoch bump per transaction). A change is made in two
steps, as in Kafka: ``prepare_*`` checks that the transition is legal, marks it pending
and returns the `TxnTransitMetadata` to write to __transaction_state; once that record is
written, `complete_transition_to` installs it (or `abort_pending` drops it when the write
failed). While a transition is pending the coordinator answers CONCURRENT_TRANSACTIONS.

    Empty -> Ongoing               AddPartitionsToTxn / AddOffsetsToTxn
    Ongoing -> PrepareCommit|Abort EndTxn (or a timeout / fencing abort)
    Prepare* -> Complete*          every partition leader wrote the marker
    Complete*|Empty -> Empty       InitProducerId bumps the epoch
    Ongoing -> PrepareEpochFence   InitProducerId of a new producer instance, or a timed-out
                                   transaction: the epoch is bumped, then PrepareAbort
    Empty|Complete* -> Dead        transactional.id.expiration.ms passed (a tombstone)

Event-loop only (the loop stands in for Kafka's per-metadata lock: nothing awaits
between a check and the pending mark).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

from tiercel.protocol.errors import ProducerFencedError
from tiercel.protocol.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from tiercel.storage.topic_partition import TopicPartition

_SHORT_MAX: Final = 2**15 - 1


class TransactionState(IntEnum):
    """The id is the TransactionStatus byte of TransactionLogValue."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use."""
        return _KAFKA_NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionState | None:
        return _BY_KAFKA_NAME.get(name)


_KAFKA_NAMES: Final = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_KAFKA_NAME: Final = {name: state for state, name in _KAFKA_NAMES.items()}

_S = TransactionState
# Kafka's TransactionState.validPreviousStates (transaction version 0/1).
VALID_PREVIOUS_STATES: Final[dict[TransactionState, frozenset[TransactionState]]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
# States in which no transaction is open: an InitProducerId may bump the epoch, the
# id may expire.
COMPLETED_STATES: Final = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch free for fencing: Short.MaxValue - 1 is exhausted."""
    return epoch >= _SHORT_MAX - 1


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """What a transition would make of the metadata: the value written to the log.
    Immutable; any thread."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass(slots=True)
class TransactionMetadata:
    """Invariants: ``pending_state`` is the target of the one transition in flight (None
    when there is none); ``topic_partitions`` is empty unless ``state`` is Ongoing or
    Prepare*; ``producer_epoch`` only grows for one producer id."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    has_failed_epoch_fence: bool = False
    """An epoch fence bumped the epoch in memory but its PrepareAbort write failed: the
    next fence must not bump it again (Kafka's hasFailedEpochFence)."""

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @classmethod
    def from_transit(
        cls, transactional_id: str, transit: TxnTransitMetadata
    ) -> TransactionMetadata:
        """The metadata a loaded log record describes."""
        return cls(
            transactional_id,
            transit.producer_id,
            transit.last_producer_id,
            transit.producer_epoch,
            transit.last_producer_epoch,
            transit.txn_timeout_ms,
            transit.txn_state,
            set(transit.topic_partitions),
            transit.txn_start_timestamp,
            transit.txn_last_update_timestamp,
        )

    # -- prepared transitions -----------------------------------------------------------

    def prepare_no_transit(self) -> TxnTransitMetadata:
        """The current state as a transit (no pending mark): for re-sending markers."""
        return self._transit(
            self.state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.topic_partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Bump the epoch so that the current producer is fenced, before aborting its
        open transaction; the bumped epoch is never handed to a client."""
        if self.producer_epoch == _SHORT_MAX:
            raise RuntimeError(f"cannot fence {self.transactional_id}: its epoch is exhausted")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare_transition_to(
            _S.PREPARE_EPOCH_FENCE,
            self.producer_id,
            bumped,
            NO_PRODUCER_EPOCH,
            self.txn_timeout_ms,
            frozenset(self.topic_partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    def prepare_increment_producer_epoch(
        self, new_txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata:
        """Empty at the next epoch. With ``expected_epoch`` (KIP-360) the producer must hold
        the current epoch, or be retrying after a bump it did not hear about (then the
        current epoch is answered again); anything else is ProducerFencedError."""
        if self.is_producer_epoch_exhausted:
            raise RuntimeError(f"cannot bump {self.transactional_id}: its epoch is exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            raise ProducerFencedError(
                f"producer epoch {expected_epoch} of {self.transactional_id} is fenced "
                f"(current {self.producer_epoch})"
            )
        return self._prepare_transition_to(
            _S.EMPTY,
            self.producer_id,
            epoch,
            last_epoch,
            new_txn_timeout_ms,
            frozenset(),
            -1,
            now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """A new producer id at epoch 0, once the old id's epochs are used up."""
        if self.pending_transition_in_progress:
            raise RuntimeError(f"{self.transactional_id} already has a transition pending")
        last_epoch = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        transit = TxnTransitMetadata(
            new_producer_id,
            self.producer_id,
            0,
            last_epoch,
            new_txn_timeout_ms,
            _S.EMPTY,
            frozenset(),
            -1,
            now_ms,
        )
        self._check_transition(_S.EMPTY)
        self.pending_state = _S.EMPTY
        return transit

    def prepare_add_partitions(
        self, added: frozenset[TopicPartition] | set[TopicPartition], now_ms: int
    ) -> TxnTransitMetadata:
        """Ongoing with ``added``; a new transaction starts its clock now."""
        start = now_ms if self.state in COMPLETED_STATES else self.txn_start_timestamp
        return self._prepare_transition_to(
            _S.ONGOING,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.topic_partitions | set(added)),
            start,
            now_ms,
        )

    def prepare_abort_or_commit(
        self, new_state: TransactionState, now_ms: int
    ) -> TxnTransitMetadata:
        return self._prepare_transition_to(
            new_state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.topic_partitions),
            self.txn_start_timestamp,
            now_ms,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """CompleteCommit or CompleteAbort after PrepareCommit or PrepareAbort."""
        state = _S.COMPLETE_COMMIT if self.state == _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        return self._prepare_transition_to(
            state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            now_ms,
        )

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare_transition_to(
            _S.DEAD,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    def _transit(
        self,
        state: TransactionState,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        timeout_ms: int,
        partitions: frozenset[TopicPartition],
        start: int,
        update: int,
    ) -> TxnTransitMetadata:
        return TxnTransitMetadata(
            producer_id,
            self.last_producer_id,
            epoch,
            last_epoch,
            timeout_ms,
            state,
            partitions,
            start,
            update,
        )

    def _check_transition(self, new_state: TransactionState) -> None:
        if self.pending_state is not None:
            raise RuntimeError(
                f"{self.transactional_id}: preparing {new_state.kafka_name} while "
                f"{self.pending_state.kafka_name} is pending"
            )
        if self.state not in VALID_PREVIOUS_STATES[new_state]:
            raise RuntimeError(
                f"{self.transactional_id}: illegal transition "
                f"{self.state.kafka_name} -> {new_state.kafka_name}"
            )

    def _prepare_transition_to(
        self,
        new_state: TransactionState,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        timeout_ms: int,
        partitions: frozenset[TopicPartition],
        start: int,
        update: int,
    ) -> TxnTransitMetadata:
        self._check_transition(new_state)
        transit = self._transit(
            new_state, producer_id, epoch, last_epoch, timeout_ms, partitions, start, update
        )
        self.pending_state = new_state
        return transit

    # -- completion ---------------------------------------------------------------------

    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Install a transition whose record is written. RuntimeError if it is not the
        pending one or breaks the metadata's invariants (Kafka throws
        IllegalStateException there)."""
        target = self.pending_state
        if target is None or target != transit.txn_state:
            raise RuntimeError(
                f"{self.transactional_id}: completing {transit.txn_state.kafka_name} but "
                f"{'nothing' if target is None else target.kafka_name} is pending"
            )
        if transit.txn_state != _S.EMPTY and transit.producer_id != self.producer_id:
            raise RuntimeError(f"{self.transactional_id}: the producer id changed outside Empty")
        if transit.producer_id == self.producer_id and transit.producer_epoch < self.producer_epoch:
            raise RuntimeError(f"{self.transactional_id}: the producer epoch went back")
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.txn_state
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None
        self.has_failed_epoch_fence = False

    def abort_pending(self) -> None:
        """The pending transition's write failed: it never happened."""
        self.pending_state = None


def new_transaction_metadata(
    transactional_id: str, producer_id: int, txn_timeout_ms: int, now_ms: int
) -> TransactionMetadata:
    """A transactional id seen for the first time: Empty, no epoch yet."""
    return TransactionMetadata(
        transactional_id,
        producer_id,
        NO_PRODUCER_ID,
        NO_PRODUCER_EPOCH,
        NO_PRODUCER_EPOCH,
        txn_timeout_ms,
        _S.EMPTY,
        set(),
        -1,
        now_ms,
    )
