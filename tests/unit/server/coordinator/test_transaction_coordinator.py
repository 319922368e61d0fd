"""The transaction coordinator on an in-memory __transaction_state: loading and
unloading with leadership, failed writes, stale leader epochs, and a new leader
finishing a transaction that was between PrepareCommit and CompleteCommit."""

from __future__ import annotations

import asyncio
import types

import pytest
from txn_support import coordinator, loaded, txn_replicas, txn_tp

from tiercel.protocol.errors import (
    CoordinatorLoadInProgressError,
    ErrorCode,
    NotCoordinatorError,
    NotEnoughReplicasError,
)
from tiercel.server.coordinator.transaction.transaction_metadata import TransactionState
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

TP = TopicPartition("data", 0)


@pytest.fixture
async def scheduler() -> Scheduler:
    return Scheduler(asyncio.get_running_loop(), 2)


async def test_leadership_loads_and_unloads(scheduler: Scheduler) -> None:
    replicas = txn_replicas()
    coord, _ = await coordinator(replicas, scheduler)
    manager = coord.manager
    assert manager.get_transaction_state("a") is None
    tp = txn_tp("a")
    coord.on_leadership_change(tp, None)
    with pytest.raises(NotCoordinatorError):
        manager.get_transaction_state("a")
    coord.on_leadership_change(tp, 3)
    with pytest.raises(CoordinatorLoadInProgressError):
        manager.get_transaction_state("a")
    await loaded(manager)
    assert manager.owned_coordinator_epoch(tp.partition) == 3
    # A leadership change older than the one already seen is ignored.
    coord.on_leadership_change(tp, 2)
    assert manager.owned_coordinator_epoch(tp.partition) == 3
    await coord.shutdown()


async def test_a_failed_write_changes_nothing(scheduler: Scheduler) -> None:
    replicas = txn_replicas()
    coord, _ = await coordinator(replicas, scheduler)
    init = await coord.handle_init_producer_id("a", 1000, None)
    assert (init.error, init.producer_epoch) == (ErrorCode.none, 0)
    replicas.fail_with = NotEnoughReplicasError("isr")
    error = await coord.handle_add_partitions_to_transaction("a", init.producer_id, 0, [TP])
    assert error == ErrorCode.coordinator_not_available
    state = coord.manager.get_transaction_state("a")
    assert state is not None
    metadata = state.transaction_metadata
    assert (metadata.state, metadata.pending_state) == (TransactionState.EMPTY, None)
    replicas.fail_with = None
    assert await coord.handle_add_partitions_to_transaction("a", init.producer_id, 0, [TP]) == (
        ErrorCode.none
    )
    # The partition's leadership moves away: its writes answer NOT_COORDINATOR.
    replicas.partitions[txn_tp("a")].is_leader = False
    assert await coord.handle_end_transaction("a", init.producer_id, 0, True) == (
        ErrorCode.not_coordinator
    )
    await coord.shutdown()


async def test_a_new_leader_finishes_a_prepared_commit(scheduler: Scheduler) -> None:
    replicas = txn_replicas()
    first, first_markers = await coordinator(replicas, scheduler)
    init = await first.handle_init_producer_id("a", 1000, None)
    pid = init.producer_id
    assert await first.handle_add_partitions_to_transaction("a", pid, 0, [TP]) == ErrorCode.none
    assert await first.handle_end_transaction("a", pid, 0, True) == ErrorCode.none
    [(epoch, _, transit)] = first_markers.sent
    assert (epoch, transit.txn_state) == (0, TransactionState.COMPLETE_COMMIT)
    # The broker dies before the markers are written; the next leader (epoch 1) loads
    # PrepareCommit and sends them again, at its own coordinator epoch.
    await first.shutdown()
    second, second_markers = await coordinator(replicas, scheduler, epoch=1)
    [(epoch, metadata, transit)] = second_markers.sent
    assert (epoch, metadata.state, metadata.topic_partitions) == (
        1,
        TransactionState.PREPARE_COMMIT,
        {TP},
    )
    assert transit.txn_state == TransactionState.COMPLETE_COMMIT
    # Meanwhile the producer's requests wait.
    assert await second.handle_add_partitions_to_transaction("a", pid, 0, [TP]) == (
        ErrorCode.concurrent_transactions
    )
    assert await second.manager.append_transaction_to_log("a", 1, transit) == ErrorCode.none
    state = second.manager.get_transaction_state("a")
    assert state is not None
    assert state.transaction_metadata.state == TransactionState.COMPLETE_COMMIT
    await second.shutdown()


async def test_timed_out_transactions_are_aborted_with_an_epoch_bump(
    scheduler: Scheduler,
) -> None:
    replicas = txn_replicas()
    coord, markers = await coordinator(replicas, scheduler)
    clock = types.SimpleNamespace(now=1_000_000)
    coord.manager.clock = lambda: clock.now
    init = await coord.handle_init_producer_id("slow", 500, None)
    pid = init.producer_id
    assert await coord.handle_add_partitions_to_transaction("slow", pid, 0, [TP]) == (
        ErrorCode.none
    )
    assert await coord.abort_timed_out_transactions() == 0
    clock.now += 501
    assert await coord.abort_timed_out_transactions() == 1
    [(_, metadata, transit)] = markers.sent
    assert (metadata.state, metadata.producer_epoch) == (TransactionState.PREPARE_ABORT, 1)
    assert transit.txn_state == TransactionState.COMPLETE_ABORT
    # The producer, at epoch 0, is fenced.
    assert await coord.handle_end_transaction("slow", pid, 0, True) == ErrorCode.producer_fenced
    await coord.shutdown()
