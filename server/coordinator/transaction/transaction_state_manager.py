"""TransactionStateManager: the transactional ids of the __transaction_state partitions
this broker leads, and their persistence (Kafka's TransactionStateManager).

Every transition is a record in __transaction_state written through ReplicaManager with
acks=-1, and takes effect only once written. When this broker becomes leader of a
partition it reads it back (its ids answer COORDINATOR_LOAD_IN_PROGRESS meanwhile); the
leader epoch becomes the coordinator epoch that the markers it sends carry, so that
partition leaders can refuse markers from a coordinator that lost the partition. When it
stops leading, the partition's ids are dropped (their requests get NOT_COORDINATOR).
The partition of an id is ``Utils.abs(transactionalId.hashCode) % partitions``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.compression import CompressionType
from tiercel.protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    ErrorCode,
    KafkaError,
    NotCoordinatorError,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.coordinator.coordinator_epochs import CoordinatorEpochs
from tiercel.server.coordinator.coordinator_partition import partition_for
from tiercel.server.coordinator.transaction.transaction_config import (
    TRANSACTION_STATE_TOPIC_NAME,
    TransactionConfig,
)
from tiercel.server.coordinator.transaction.transaction_log import (
    encode_key,
    encode_value,
    value_from_transit,
)
from tiercel.server.coordinator.transaction.transaction_metadata import (
    COMPLETED_STATES,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from tiercel.server.coordinator.transaction.transaction_state_loader import load_txn_partition
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.replica_manager import ReplicaManager
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.transaction_coordinator")
LOAD_RETRY_MS: Final = 5000

# Kafka's translation of append errors in appendTransactionToLog.
_APPEND_ERRORS: Final = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
}


def now_ms() -> int:
    return int(time.time() * 1000)


def is_timed_out(metadata: TransactionMetadata, now: int) -> bool:
    """An open transaction past its timeout with no transition pending (Kafka's
    timedOutTransactions: Ongoing only; PrepareEpochFence is never a resting state)."""
    return (
        metadata.state == TransactionState.ONGOING
        and not metadata.pending_transition_in_progress
        and metadata.txn_start_timestamp + metadata.txn_timeout_ms < now
    )


def _log_write_failed(transactional_id: str, transit: TxnTransitMetadata, error: ErrorCode) -> None:
    log_event(
        _log,
        logging.WARNING,
        "transaction_state_write_failed",
        transactional_id=transactional_id,
        state=transit.txn_state.kafka_name,
        error=error.name,
    )


@dataclass(frozen=True, slots=True)
class CoordinatorEpochAndTxnMetadata:
    coordinator_epoch: int
    transaction_metadata: TransactionMetadata


@dataclass(slots=True)
class _TxnPartition:
    coordinator_epoch: int
    metadata: dict[str, TransactionMetadata] = field(default_factory=dict)


# Called for each loaded id whose transaction was between Prepare* and Complete*: its
# markers must be (re)sent (Kafka's addTxnMarkersToSend on load).
PendingCompletion = Callable[[int, TransactionMetadata, TxnTransitMetadata], None]


class TransactionStateManager:
    """Invariants: a partition is in at most one of ``_owned`` and ``_loading``;
    ``_epochs`` never decreases per partition; every id in an owned partition's cache
    maps to that partition.

    Event-loop only; partition reads are decoded in the executor.
    """

    def __init__(
        self,
        config: TransactionConfig,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
        scheduler: Scheduler,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config
        self._replica_manager = replica_manager
        self._cache = metadata_cache
        self._scheduler = scheduler
        self.clock = clock
        self._owned: dict[int, _TxnPartition] = {}
        self._loading: set[int] = set()
        self._epochs = CoordinatorEpochs()
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        self._shutting_down = False

    # -- partitions ---------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        topic = self._cache.topic(TRANSACTION_STATE_TOPIC_NAME)
        if topic is None or not topic.partition_count:
            return self.config.transaction_state_log_num_partitions
        return topic.partition_count

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partition_count)

    def validate_transaction_timeout_ms(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.transaction_max_timeout_ms

    def get_transaction_state(self, transactional_id: str) -> CoordinatorEpochAndTxnMetadata | None:
        """The id's metadata (None: unknown here). NotCoordinatorError when this broker
        does not lead its partition, CoordinatorLoadInProgressError while loading it,
        CoordinatorNotAvailableError while shutting down."""
        if self._shutting_down:
            raise CoordinatorNotAvailableError("the transaction coordinator is shutting down")
        partition = self.partition_for(transactional_id)
        if partition in self._loading:
            raise CoordinatorLoadInProgressError(
                f"{TRANSACTION_STATE_TOPIC_NAME}-{partition} is being loaded"
            )
        entry = self._owned.get(partition)
        if entry is None:
            raise NotCoordinatorError(
                f"this broker is not the transaction coordinator of {transactional_id}"
            )
        metadata = entry.metadata.get(transactional_id)
        return (
            None
            if metadata is None
            else CoordinatorEpochAndTxnMetadata(entry.coordinator_epoch, metadata)
        )

    def put_transaction_state_if_not_exists(
        self, metadata: TransactionMetadata
    ) -> CoordinatorEpochAndTxnMetadata:
        """Cache a new id unless one exists; the cached one. Raises as
        `get_transaction_state`."""
        existing = self.get_transaction_state(metadata.transactional_id)
        if existing is not None:
            return existing
        entry = self._owned[self.partition_for(metadata.transactional_id)]
        entry.metadata[metadata.transactional_id] = metadata
        return CoordinatorEpochAndTxnMetadata(entry.coordinator_epoch, metadata)

    def all_transactions(self) -> Iterator[TransactionMetadata]:
        for entry in self._owned.values():
            yield from entry.metadata.values()

    @property
    def is_loading(self) -> bool:
        return bool(self._loading)

    # -- writes -------------------------------------------------------------------------

    async def append_transaction_to_log(
        self, transactional_id: str, coordinator_epoch: int, transit: TxnTransitMetadata
    ) -> ErrorCode:
        """Write ``transit`` and, once written and while this coordinator still owns the
        id at ``coordinator_epoch``, install it. NONE, or the error to answer."""
        error = await self._append(transactional_id, coordinator_epoch, transit)
        entry = self._owned.get(self.partition_for(transactional_id))
        metadata = None if entry is None else entry.metadata.get(transactional_id)
        if entry is None or entry.coordinator_epoch != coordinator_epoch or metadata is None:
            # The partition moved (or was reloaded) meanwhile: the new owner has it.
            return ErrorCode.not_coordinator
        if error != ErrorCode.none:
            metadata.abort_pending()
            _log_write_failed(transactional_id, transit, error)
            return error
        metadata.complete_transition_to(transit)
        return ErrorCode.none

    async def _append(
        self, transactional_id: str, coordinator_epoch: int, transit: TxnTransitMetadata
    ) -> ErrorCode:
        """Write ``transit`` (Dead as a tombstone) with acks=-1 if this coordinator still
        owns the id at ``coordinator_epoch``; NONE, or the error to answer. Nothing awaits
        between the check and the leader's local append: as Kafka's
        appendTransactionToLog holds its state lock across both, a record prepared
        before the partition was unloaded (and maybe loaded again) never lands after the
        new owner's records."""
        try:
            current = self.get_transaction_state(transactional_id)
        except KafkaError as e:
            return e.error_code
        if current is None or current.coordinator_epoch != coordinator_epoch:
            return ErrorCode.not_coordinator
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, self.partition_for(transactional_id))
        replica = self._replica_manager.partitions.get(tp)
        if replica is None or not replica.is_leader:
            return ErrorCode.not_coordinator
        value = None if transit.txn_state == TransactionState.DEAD else value_from_transit(transit)
        record = SimpleRecord(
            encode_key(transactional_id),
            None if value is None else encode_value(value),
            timestamp=self.clock(),
        )
        batch = build_record_batch([record], compression=CompressionType.NONE)
        results = await self._replica_manager.append_records(
            self.config.request_timeout_ms, -1, {tp: batch}, internal_topics_allowed=True
        )
        result_error = results[tp].error
        if result_error is None:
            return ErrorCode.none
        return _APPEND_ERRORS.get(result_error.error_code, result_error.error_code)

    # -- expiration ---------------------------------------------------------------------

    def timed_out_transactions(self, now: int) -> list[tuple[str, int, int]]:
        """(id, producer id, epoch) of open transactions past their timeout with no
        transition pending (Kafka's timedOutTransactions)."""
        return [
            (metadata.transactional_id, metadata.producer_id, metadata.producer_epoch)
            for metadata in self.all_transactions()
            if is_timed_out(metadata, now)
        ]

    async def remove_expired_transactional_ids(self) -> int:
        """Write tombstones for ids with no open transaction and no update for
        ``transactional.id.expiration.ms``; the number removed.

        Each id is looked up and checked again right before its tombstone is written,
        as Kafka's removeExpiredTransactionalIds checks and marks each id under its lock:
        the writes before it let the id's producer come back meanwhile (InitProducerId),
        or its partition be reloaded."""
        now = self.clock()
        candidates = [
            metadata.transactional_id
            for metadata in self.all_transactions()
            if self._should_expire(metadata, now)
        ]
        removed = 0
        for transactional_id in candidates:
            prepared = self._prepare_expiration(transactional_id)
            if prepared is not None and await self._write_tombstone(transactional_id, *prepared):
                removed += 1
        if removed:
            log_event(_log, logging.INFO, "transactional_ids_expired", count=removed)
        return removed

    def _should_expire(self, metadata: TransactionMetadata, now: int) -> bool:
        """Kafka's shouldExpire, with the pending check its caller makes."""
        return (
            metadata.state in COMPLETED_STATES
            and not metadata.pending_transition_in_progress
            and metadata.txn_last_update_timestamp
            <= now - self.config.transactional_id_expiration_ms
        )

    def _prepare_expiration(self, transactional_id: str) -> tuple[int, TxnTransitMetadata] | None:
        """(coordinator epoch, the Dead transit) if the id is still this coordinator's
        and still expired now; None otherwise."""
        try:
            current = self.get_transaction_state(transactional_id)
        except KafkaError:
            return None  # unloaded or loading: its next owner expires it
        if current is None or not self._should_expire(current.transaction_metadata, self.clock()):
            return None
        return current.coordinator_epoch, current.transaction_metadata.prepare_dead()

    async def _write_tombstone(
        self, transactional_id: str, coordinator_epoch: int, transit: TxnTransitMetadata
    ) -> bool:
        """Write the id's tombstone and drop it from the cache; whether it was dropped.
        As Kafka's writeTombstonesForExpiredTransactionalIds, only an id still pending
        Dead at the tombstone's coordinator and producer epochs is dropped."""
        error = await self._append(transactional_id, coordinator_epoch, transit)
        entry = self._owned.get(self.partition_for(transactional_id))
        metadata = None if entry is None else entry.metadata.get(transactional_id)
        if (
            entry is None
            or entry.coordinator_epoch != coordinator_epoch
            or metadata is None
            or metadata.pending_state != TransactionState.DEAD
            or metadata.producer_epoch != transit.producer_epoch
        ):
            # Its partition moved or was reloaded: the metadata prepared is not the
            # cache's any more, and whatever the new owner has stays.
            log_event(
                _log,
                logging.WARNING,
                "expired_transactional_id_kept",
                transactional_id=transactional_id,
                coordinator_epoch=coordinator_epoch,
                error=error.name,
            )
            return False
        if error != ErrorCode.none:
            metadata.abort_pending()
            _log_write_failed(transactional_id, transit, error)
            return False
        metadata.complete_transition_to(transit)
        del entry.metadata[transactional_id]
        return True

    # -- loading and unloading ----------------------------------------------------------

    def schedule_load(self, partition: int, epoch: int, on_pending: PendingCompletion) -> None:
        if not self._epochs.maybe_update(partition, epoch):
            return
        entry = self._owned.get(partition)
        if entry is not None and entry.coordinator_epoch == epoch:
            return
        self._owned.pop(partition, None)
        running = self._load_tasks.pop(partition, None)
        if running is not None:
            running.cancel()
        self._loading.add(partition)
        self._load_tasks[partition] = self._scheduler.spawn(
            self._load(partition, epoch, on_pending),
            f"load {TRANSACTION_STATE_TOPIC_NAME}-{partition}",
        )

    async def _load(self, partition: int, epoch: int, on_pending: PendingCompletion) -> None:
        started = time.monotonic()
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, partition)

        def still_wanted() -> bool:
            return partition in self._loading and self._epochs.get(partition) == epoch

        entry = await self._read_partition(tp, epoch, still_wanted)
        if entry is None:
            if still_wanted():
                self._scheduler.call_later(
                    LOAD_RETRY_MS / 1000, lambda: self._retry_load(partition, epoch, on_pending)
                )
            return
        if not still_wanted():
            return
        self._loading.discard(partition)
        self._owned[partition] = entry
        log_event(
            _log,
            logging.INFO if entry.metadata else logging.DEBUG,
            "transaction_partition_loaded",
            partition=str(tp),
            epoch=epoch,
            transactional_ids=len(entry.metadata),
            ms=round((time.monotonic() - started) * 1000, 1),
        )
        for metadata in entry.metadata.values():
            if metadata.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
                # Kafka's loadTransactionsForTxnTopicPartition: a transaction that was
                # between PrepareX and CompleteX is driven to completion by its new owner.
                on_pending(epoch, metadata, metadata.prepare_complete(self.clock()))

    async def _read_partition(
        self, tp: TopicPartition, epoch: int, still_wanted: Callable[[], bool]
    ) -> _TxnPartition | None:
        """The partition's ids as its log leaves them; None when the read failed
        (logged). A partition whose ids were not read is never served: its transactions
        would look lost."""
        entry = _TxnPartition(epoch)
        try:
            replica = self._replica_manager.partitions.get(tp)
            loaded = None
            if replica is not None:
                loaded = await load_txn_partition(
                    replica.log,
                    self._scheduler,
                    self.config.transaction_state_log_load_buffer_size,
                    still_wanted,
                )
            if loaded is not None:
                for transactional_id, value in loaded.values.items():
                    entry.metadata[transactional_id] = TransactionMetadata.from_transit(
                        transactional_id, value.to_transit()
                    )
                if loaded.skipped:
                    log_event(
                        _log, logging.WARNING, "transaction_records_skipped", records=loaded.skipped
                    )
        except Exception as e:
            log_event(
                _log,
                logging.ERROR,
                "transaction_partition_load_failed",
                partition=str(tp),
                reason=repr(e),
                retry_ms=LOAD_RETRY_MS,
            )
            return None
        finally:
            if self._load_tasks.get(tp.partition) is asyncio.current_task():
                del self._load_tasks[tp.partition]
        return entry

    def _retry_load(self, partition: int, epoch: int, on_pending: PendingCompletion) -> None:
        if partition in self._loading and self._epochs.get(partition) == epoch:
            self._loading.discard(partition)
            self.schedule_load(partition, epoch, on_pending)

    def remove_transactions_for_partition(self, partition: int, epoch: int | None) -> None:
        if not self._epochs.maybe_update(partition, epoch):
            return
        task = self._load_tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        self._loading.discard(partition)
        entry = self._owned.pop(partition, None)
        if entry is not None:
            log_event(
                _log,
                logging.INFO if entry.metadata else logging.DEBUG,
                "transaction_partition_unloaded",
                partition=f"{TRANSACTION_STATE_TOPIC_NAME}-{partition}",
                transactional_ids=len(entry.metadata),
            )

    def owned_coordinator_epoch(self, partition: int) -> int | None:
        entry = self._owned.get(partition)
        return None if entry is None else entry.coordinator_epoch

    def owned_partitions(self) -> Collection[int]:
        return self._owned.keys()

    def shutdown(self) -> None:
        self._shutting_down = True
        for partition in sorted(set(self._owned) | self._loading):
            self.remove_transactions_for_partition(partition, None)
