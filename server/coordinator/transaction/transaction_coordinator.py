"""TransactionCoordinator: the transaction APIs over `TransactionStateManager` (Kafka's
TransactionCoordinator, transaction version 0/1).

InitProducerId gives a transactional id its producer id and a new epoch (fencing older
producer instances; KIP-360 lets a producer that knows its id and epoch bump them);
AddPartitionsToTxn / AddOffsetsToTxn open or extend a transaction; EndTxn writes
PrepareCommit/PrepareAbort, answers, and has the marker channel finish the transaction.
An open transaction past its timeout is aborted every
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` with an epoch bump that
fences its producer; ids idle for ``transactional.id.expiration.ms`` are removed. The
coordinator of an id is the leader of its __transaction_state partition: leadership
changes load and unload partitions here.

Event-loop only: no await separates a check from the pending transition it guards.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.protocol.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from tiercel.server.coordinator.transaction.transaction_config import (
    TRANSACTION_STATE_TOPIC_NAME,
)
from tiercel.server.coordinator.transaction.transaction_marker_channel import (
    TransactionMarkerChannelManager,
)
from tiercel.server.coordinator.transaction.transaction_metadata import (
    COMPLETED_STATES,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    is_epoch_exhausted,
    new_transaction_metadata,
)
from tiercel.server.coordinator.transaction.transaction_state_manager import (
    CoordinatorEpochAndTxnMetadata,
    TransactionStateManager,
    is_timed_out,
)
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.transaction_coordinator")
_S = TransactionState


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class _Refused(Exception):
    """A request refused with ``error`` before anything was written."""

    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


class TransactionCoordinator:
    """Invariants: requests are served only while active (between `startup` and
    `shutdown`). Event-loop only."""

    def __init__(
        self,
        manager: TransactionStateManager,
        markers: TransactionMarkerChannelManager,
        generate_producer_id: Callable[[], Awaitable[int]],
        scheduler: Scheduler,
    ) -> None:
        self.manager = manager
        self.markers = markers
        self._generate_producer_id = generate_producer_id
        self._scheduler = scheduler
        self._active = False
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle ----------------------------------------------------------------------

    def startup(self) -> None:
        config = self.manager.config
        self._active = True
        self._tasks = [
            self._scheduler.spawn(
                self._every(
                    config.abort_timed_out_transactions_interval_ms,
                    self.abort_timed_out_transactions,
                ),
                "transaction-abort",
            ),
            self._scheduler.spawn(
                self._every(
                    config.remove_expired_transactional_ids_interval_ms,
                    self.manager.remove_expired_transactional_ids,
                ),
                "transactionalId-expiration",
            ),
        ]

    async def shutdown(self) -> None:
        self._active = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.manager.shutdown()
        await self.markers.shutdown()

    async def _every(self, interval_ms: int, action: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await action()
            except Exception as e:
                log_event(_log, logging.ERROR, "transaction_task_failed", reason=repr(e))

    def on_leadership_change(self, tp: TopicPartition, leader_epoch: int | None) -> None:
        """ReplicaManager's listener (Kafka's onElection / onResignation)."""
        if tp.topic != TRANSACTION_STATE_TOPIC_NAME:
            return
        if leader_epoch is None:
            self.manager.remove_transactions_for_partition(tp.partition, None)
        else:
            self.manager.schedule_load(tp.partition, leader_epoch, self._send_markers)

    def partition_for(self, transactional_id: str) -> int:
        return self.manager.partition_for(transactional_id)

    def _state(self, transactional_id: str) -> CoordinatorEpochAndTxnMetadata | None:
        if not self._active:
            raise _Refused(ErrorCode.coordinator_not_available)
        try:
            return self.manager.get_transaction_state(transactional_id)
        except KafkaError as e:
            raise _Refused(e.error_code) from None

    def _send_markers(
        self, coordinator_epoch: int, metadata: TransactionMetadata, transit: TxnTransitMetadata
    ) -> None:
        partition = self.partition_for(metadata.transactional_id)
        self.markers.add_txn_markers_to_send(
            coordinator_epoch,
            metadata,
            transit,
            lambda: self.manager.owned_coordinator_epoch(partition) == coordinator_epoch,
        )

    # -- InitProducerId -----------------------------------------------------------------

    async def handle_init_producer_id(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        expected: tuple[int, int] | None,
    ) -> InitProducerIdResult:
        """``expected`` is the (producer id, epoch) a KIP-360 client holds."""
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.invalid_request)
        if not self.manager.validate_transaction_timeout_ms(transaction_timeout_ms):
            return InitProducerIdResult(ErrorCode.invalid_transaction_timeout)
        try:
            existing = self._state(transactional_id)
            if existing is None:
                producer_id = await self._generate_producer_id()
                existing = self.manager.put_transaction_state_if_not_exists(
                    new_transaction_metadata(
                        transactional_id, producer_id, transaction_timeout_ms, self.manager.clock()
                    )
                )
            # The producer id allocation above may have awaited: read the state again.
            existing = self._state(transactional_id) or existing
            epoch, transit = await self._prepare_init(
                transactional_id, transaction_timeout_ms, existing, expected
            )
        except _Refused as e:
            return InitProducerIdResult(e.error)
        except KafkaError as e:
            return InitProducerIdResult(e.error_code)
        if transit.txn_state == _S.PREPARE_EPOCH_FENCE:
            # Abort the open transaction at the bumped epoch, then have the client retry
            # (it then gets yet another epoch, never the one used to fence).
            error = await self._end_transaction(
                transactional_id, transit.producer_id, transit.producer_epoch, False, False
            )
            return InitProducerIdResult(
                error if error != ErrorCode.none else ErrorCode.concurrent_transactions
            )
        error = await self.manager.append_transaction_to_log(transactional_id, epoch, transit)
        if error != ErrorCode.none:
            return InitProducerIdResult(error)
        log_event(
            _log,
            logging.INFO,
            "transactional_id_initialized",
            transactional_id=transactional_id,
            producer_id=transit.producer_id,
            producer_epoch=transit.producer_epoch,
        )
        return InitProducerIdResult(ErrorCode.none, transit.producer_id, transit.producer_epoch)

    async def _prepare_init(
        self,
        transactional_id: str,
        timeout_ms: int,
        existing: CoordinatorEpochAndTxnMetadata,
        expected: tuple[int, int] | None,
    ) -> tuple[int, TxnTransitMetadata]:
        metadata = existing.transaction_metadata
        if metadata.pending_transition_in_progress:
            raise _Refused(ErrorCode.concurrent_transactions)
        if expected is not None and not _is_valid_producer_id(metadata, *expected):
            raise _Refused(ErrorCode.producer_fenced)
        state = metadata.state
        if state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            raise _Refused(ErrorCode.concurrent_transactions)
        if state == _S.ONGOING:
            return existing.coordinator_epoch, metadata.prepare_fence_producer_epoch()
        if state not in COMPLETED_STATES:
            raise RuntimeError(f"{transactional_id} is {state.kafka_name}: never a resting state")
        now = self.manager.clock()
        if metadata.is_producer_epoch_exhausted and (
            expected is None or expected[1] == metadata.producer_epoch
        ):
            new_id = await self._generate_producer_id()
            # The await let other requests in, and the partition may have been unloaded
            # and loaded again: this coordinator epoch and metadata must still be the
            # cache's (Kafka allocates under the id's lock, so nothing can change there).
            current = self._state(transactional_id)
            if current is not None and current.coordinator_epoch != existing.coordinator_epoch:
                raise _Refused(ErrorCode.not_coordinator)
            if (
                current is None
                or current.transaction_metadata is not metadata
                or metadata.pending_transition_in_progress
                or metadata.state not in COMPLETED_STATES
            ):
                raise _Refused(ErrorCode.concurrent_transactions)
            transit = metadata.prepare_producer_id_rotation(
                new_id, timeout_ms, now, expected is not None
            )
        else:
            transit = metadata.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], now
            )
        return existing.coordinator_epoch, transit

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------

    async def handle_add_partitions_to_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.invalid_request
        try:
            existing = self._state(transactional_id)
        except _Refused as e:
            return e.error
        if existing is None:
            return ErrorCode.invalid_producer_id_mapping
        metadata = existing.transaction_metadata
        if metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if metadata.pending_transition_in_progress or metadata.state in (
            _S.PREPARE_COMMIT,
            _S.PREPARE_ABORT,
        ):
            return ErrorCode.concurrent_transactions
        if metadata.state == _S.ONGOING and set(partitions) <= metadata.topic_partitions:
            return ErrorCode.none
        transit = metadata.prepare_add_partitions(set(partitions), self.manager.clock())
        return await self.manager.append_transaction_to_log(
            transactional_id, existing.coordinator_epoch, transit
        )

    def handle_verify_partitions_in_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ verify_only (KIP-890 part 1): whether each partition is
        already in the producer's open transaction."""

        def everyone(error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(partitions, error)

        if not transactional_id:
            return everyone(ErrorCode.invalid_request)
        try:
            existing = self._state(transactional_id)
        except _Refused as e:
            return everyone(e.error)
        if existing is None:
            return everyone(ErrorCode.invalid_producer_id_mapping)
        metadata = existing.transaction_metadata
        if metadata.producer_id != producer_id:
            return everyone(ErrorCode.invalid_producer_id_mapping)
        if metadata.producer_epoch != producer_epoch:
            return everyone(ErrorCode.producer_fenced)
        if metadata.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            return everyone(ErrorCode.concurrent_transactions)
        return {
            tp: ErrorCode.none if tp in metadata.topic_partitions else ErrorCode.invalid_txn_state
            for tp in partitions
        }

    # -- EndTxn -------------------------------------------------------------------------

    async def handle_end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        return await self._end_transaction(
            transactional_id, producer_id, producer_epoch, commit, True
        )

    async def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        from_client: bool,
    ) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.invalid_request
        try:
            existing = self._state(transactional_id)
            if existing is None:
                return ErrorCode.invalid_producer_id_mapping
            transit, is_epoch_fence = self._prepare_end(
                existing.transaction_metadata, producer_id, producer_epoch, commit, from_client
            )
        except _Refused as e:
            return e.error
        coordinator_epoch = existing.coordinator_epoch
        metadata = existing.transaction_metadata
        error = await self.manager.append_transaction_to_log(
            transactional_id, coordinator_epoch, transit
        )
        if error != ErrorCode.none:
            if is_epoch_fence:
                metadata.has_failed_epoch_fence = True
            return error
        try:
            current = self.manager.get_transaction_state(transactional_id)
        except KafkaError:
            current = None  # the partition moved while the record was being written
        if current is None or current.coordinator_epoch != coordinator_epoch:
            return ErrorCode.not_coordinator
        if metadata.pending_transition_in_progress:
            return ErrorCode.concurrent_transactions
        complete = metadata.prepare_complete(self.manager.clock())
        self._send_markers(coordinator_epoch, metadata, complete)
        return ErrorCode.none

    def _prepare_end(
        self,
        metadata: TransactionMetadata,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        from_client: bool,
    ) -> tuple[TxnTransitMetadata, bool]:
        if metadata.producer_id != producer_id:
            raise _Refused(ErrorCode.invalid_producer_id_mapping)
        # A client must hold the current epoch; the coordinator's own aborts carry the
        # bumped one.
        if (from_client and producer_epoch != metadata.producer_epoch) or (
            producer_epoch < metadata.producer_epoch
        ):
            raise _Refused(ErrorCode.producer_fenced)
        if metadata.pending_transition_in_progress and (
            metadata.pending_state != _S.PREPARE_EPOCH_FENCE
        ):
            raise _Refused(ErrorCode.concurrent_transactions)
        state = metadata.state
        if state == _S.ONGOING:
            is_epoch_fence = False
            if not commit and metadata.pending_state == _S.PREPARE_EPOCH_FENCE:
                # Kafka's endTransaction: the fence becomes an abort at the bumped epoch.
                is_epoch_fence = True
                metadata.pending_state = None
                metadata.producer_epoch = producer_epoch
                metadata.last_producer_epoch = NO_PRODUCER_EPOCH
            next_state = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
            transit = metadata.prepare_abort_or_commit(next_state, self.manager.clock())
            return transit, is_epoch_fence
        if (state == _S.COMPLETE_COMMIT and commit) or (state == _S.COMPLETE_ABORT and not commit):
            raise _Refused(ErrorCode.none)  # a retry of an EndTxn that already completed
        if (state == _S.PREPARE_COMMIT and commit) or (state == _S.PREPARE_ABORT and not commit):
            raise _Refused(ErrorCode.concurrent_transactions)
        if state in (_S.DEAD, _S.PREPARE_EPOCH_FENCE):
            raise RuntimeError(f"{metadata.transactional_id} is {state.kafka_name}")
        raise _Refused(ErrorCode.invalid_txn_state)

    # -- timeouts -----------------------------------------------------------------------

    async def abort_timed_out_transactions(self) -> int:
        """Fence and abort every open transaction past its timeout; how many were."""
        if not self._active:
            return 0
        aborted = 0
        for transactional_id, producer_id, _ in self.manager.timed_out_transactions(
            self.manager.clock()
        ):
            fence = self._prepare_timed_out_abort(transactional_id, producer_id)
            if fence is None:
                continue
            error = await self._end_transaction(
                transactional_id, fence.producer_id, fence.producer_epoch, False, False
            )
            log_event(
                _log,
                logging.INFO if error == ErrorCode.none else logging.WARNING,
                "timed_out_transaction_aborted",
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=fence.producer_epoch,
                error=error.name,
            )
            if error == ErrorCode.none:
                aborted += 1
        return aborted

    def _prepare_timed_out_abort(
        self, transactional_id: str, producer_id: int
    ) -> TxnTransitMetadata | None:
        """The epoch fence of the id's transaction if it is still open and past its
        timeout now. The aborts before it in the pass awaited their writes: meanwhile
        the producer may have ended that transaction, and begun another, which must not
        be fenced. Kafka's abortTimedOutTransactions checks the producer id and the
        pending state under the id's lock; the state and the start time are checked
        again here because the list is older than that."""
        try:
            existing = self.manager.get_transaction_state(transactional_id)
        except KafkaError:
            return None
        if existing is None:
            return None
        metadata = existing.transaction_metadata
        if metadata.producer_id != producer_id or not is_timed_out(metadata, self.manager.clock()):
            return None
        return metadata.prepare_fence_producer_epoch()

    # -- admin --------------------------------------------------------------------------

    def describe_transaction(
        self, transactional_id: str
    ) -> tuple[ErrorCode, TransactionMetadata | None]:
        if not transactional_id:
            return ErrorCode.invalid_request, None
        try:
            existing = self._state(transactional_id)
        except _Refused as e:
            return e.error, None
        if existing is None or existing.transaction_metadata.state == _S.DEAD:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, existing.transaction_metadata

    def list_transactions(
        self, producer_ids: Collection[int], states: Collection[str], duration_filter_ms: int
    ) -> tuple[ErrorCode, list[TransactionMetadata], list[str]]:
        """(error, matching transactions, unknown state filters)."""
        if not self._active:
            return ErrorCode.coordinator_not_available, [], []
        if self.manager.is_loading:
            return ErrorCode.coordinator_load_in_progress, [], []
        wanted = {TransactionState.from_kafka_name(s) for s in states}
        unknown = [s for s in states if TransactionState.from_kafka_name(s) is None]
        now = self.manager.clock()
        found = []
        for metadata in self.manager.all_transactions():
            if producer_ids and metadata.producer_id not in producer_ids:
                continue
            if states and metadata.state not in wanted:
                continue
            if duration_filter_ms >= 0 and (
                metadata.state != _S.ONGOING
                or now - metadata.txn_start_timestamp < duration_filter_ms
            ):
                continue
            found.append(metadata)
        return ErrorCode.none, found, unknown


def _is_valid_producer_id(metadata: TransactionMetadata, producer_id: int, epoch: int) -> bool:
    """Kafka's isValidProducerId: the id was just created, or the producer names its
    current id, or its previous one with an exhausted epoch (a retry after a rotation it
    never heard about)."""
    return (
        metadata.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == metadata.producer_id
        or (producer_id == metadata.last_producer_id and is_epoch_exhausted(epoch))
    )
