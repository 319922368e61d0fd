"""The transaction coordinator's background passes (the timed-out transaction aborts,
the transactional id expiration) and InitProducerId interleaved with other requests:
each test holds one write of the pass (`FakeReplicaManager.hold`, a write waiting for its
followers) or the producer id allocation (`Ids.hold`), runs what a producer or a
leadership change does meanwhile, and releases it.

The passes used to decide everything up front: an id initialized meanwhile was
tombstoned (its producer then got INVALID_PRODUCER_ID_MAPPING), a partition reloaded
meanwhile got a stale tombstone after the id's PrepareCommit (its markers were never
sent after the next load), a producer that had committed and begun a new transaction
was fenced, and one found in CompleteCommit ended the whole pass. Writes prepared at a
coordinator epoch that has passed must not reach the log at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest
from group_support import FakeReplicaManager
from txn_support import (
    Ids,
    Markers,
    coordinator,
    ids_in_one_partition,
    loaded,
    txn_records,
    txn_replicas,
    txn_tp,
    write_txn_record,
)

from tiercel.protocol.errors import ErrorCode
from tiercel.server.coordinator.transaction.transaction_coordinator import (
    TransactionCoordinator,
)
from tiercel.server.coordinator.transaction.transaction_log import TransactionLogValue
from tiercel.server.coordinator.transaction.transaction_metadata import TransactionState
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

T = TypeVar("T")
TP = TopicPartition("data", 0)
NOW = 1_700_000_000_000
TIMEOUT_MS = 500


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


Started = Callable[..., Awaitable[tuple[TransactionCoordinator, Markers, Clock]]]


@pytest.fixture
async def start(scheduler: Scheduler) -> AsyncIterator[Started]:
    """``await start(replicas, ids=None)``: a coordinator leading every partition at
    epoch 0, on a clock the test moves; shut down at teardown (before the scheduler
    is drained of its periodic tasks)."""
    coordinators: list[TransactionCoordinator] = []

    async def make(
        replicas: FakeReplicaManager, ids: Ids | None = None
    ) -> tuple[TransactionCoordinator, Markers, Clock]:
        coord, markers = await coordinator(replicas, scheduler, ids=ids)
        coordinators.append(coord)
        clock = Clock()
        coord.manager.clock = clock
        return coord, markers, clock

    yield make
    for coord in coordinators:
        await coord.shutdown()


async def while_held(
    replicas: FakeReplicaManager,
    action: Callable[[], Awaitable[T]],
    meanwhile: Callable[[], Awaitable[None]],
) -> T:
    """Run ``action`` until its first write waits for its followers, run ``meanwhile``,
    then let the write finish; ``action``'s result."""
    release = replicas.hold()
    task = asyncio.ensure_future(action())
    try:
        async with asyncio.timeout(10):
            await replicas.held.wait()
        await meanwhile()
    finally:
        release.set()
    return await task


async def open_transaction(coord: TransactionCoordinator, transactional_id: str) -> int:
    """InitProducerId and AddPartitionsToTxn: the producer id, at epoch 0."""
    init = await coord.handle_init_producer_id(transactional_id, TIMEOUT_MS, None)
    assert (init.error, init.producer_epoch) == (ErrorCode.none, 0)
    added = await coord.handle_add_partitions_to_transaction(
        transactional_id, init.producer_id, 0, [TP]
    )
    assert added == ErrorCode.none
    return init.producer_id


def state_of(coord: TransactionCoordinator, transactional_id: str) -> TransactionState | None:
    state = coord.manager.get_transaction_state(transactional_id)
    return None if state is None else state.transaction_metadata.state


# -- transactional.id expiration ---------------------------------------------------------


async def test_an_id_initialized_during_the_expiration_pass_is_kept(start: Started) -> None:
    replicas = txn_replicas()
    coord, _, clock = await start(replicas)
    idle, returning = ids_in_one_partition(2)
    for transactional_id in (idle, returning):
        init = await coord.handle_init_producer_id(transactional_id, 60_000, None)
        assert init.error == ErrorCode.none
    clock.now += coord.manager.config.transactional_id_expiration_ms + 1
    comeback = []

    async def init_again() -> None:
        # While the pass writes the first id's tombstone, the second id's producer
        # starts again: InitProducerId gives it a new epoch, updated now.
        comeback.append(await coord.handle_init_producer_id(returning, 60_000, None))

    removed = await while_held(replicas, coord.manager.remove_expired_transactional_ids, init_again)

    assert removed == 1
    assert state_of(coord, idle) is None
    [init] = comeback
    assert (init.error, init.producer_epoch) == (ErrorCode.none, 1)
    added = await coord.handle_add_partitions_to_transaction(returning, init.producer_id, 1, [TP])
    assert added == ErrorCode.none
    last = dict(txn_records(replicas, txn_tp(idle)))
    assert last[idle] is None
    assert last[returning] is not None


async def test_a_partition_reloaded_during_the_expiration_pass_gets_no_stale_tombstone(
    start: Started,
) -> None:
    replicas = txn_replicas()
    coord, markers, clock = await start(replicas)
    idle, committing = ids_in_one_partition(2)
    await coord.handle_init_producer_id(idle, 60_000, None)
    pid = (await coord.handle_init_producer_id(committing, 60_000, None)).producer_id
    clock.now += coord.manager.config.transactional_id_expiration_ms + 1
    tp = txn_tp(idle)

    async def reload_and_commit() -> None:
        # This broker leads the partition again at a new leader epoch, so it reloads
        # it; the second id's producer commits a transaction (PrepareCommit written).
        coord.on_leadership_change(tp, 1)
        await loaded(coord.manager)
        added = await coord.handle_add_partitions_to_transaction(committing, pid, 0, [TP])
        assert added == ErrorCode.none
        assert await coord.handle_end_transaction(committing, pid, 0, True) == ErrorCode.none

    await while_held(replicas, coord.manager.remove_expired_transactional_ids, reload_and_commit)

    committed = dict(txn_records(replicas, tp))[committing]
    assert committed is not None
    assert committed.transaction_status == TransactionState.PREPARE_COMMIT
    # The next leader of the partition finishes the commit: it sends the markers.
    coord.on_leadership_change(tp, 2)
    await loaded(coord.manager)
    epoch, metadata, transit = markers.sent[-1]
    assert (epoch, metadata.transactional_id, metadata.state, transit.txn_state) == (
        2,
        committing,
        TransactionState.PREPARE_COMMIT,
        TransactionState.COMPLETE_COMMIT,
    )


async def test_init_producer_id_across_a_reload_writes_nothing(start: Started) -> None:
    """An exhausted epoch rotates the producer id; the partition is reloaded while the
    new id is being allocated: the request answers NOT_COORDINATOR, and its record,
    prepared at the old coordinator epoch, never reaches the log."""
    replicas = txn_replicas()
    transactional_id = "exhausted"
    tp = txn_tp(transactional_id)
    exhausted = TransactionLogValue(
        500, 32766, 60_000, TransactionState.COMPLETE_COMMIT, None, NOW, NOW
    )
    write_txn_record(replicas, tp, transactional_id, exhausted)
    ids = Ids()
    coord, _, _ = await start(replicas, ids)
    release = ids.hold()
    init = asyncio.ensure_future(coord.handle_init_producer_id(transactional_id, 1000, None))
    try:
        async with asyncio.timeout(10):
            await ids.waiting.wait()
        coord.on_leadership_change(tp, 1)
        await loaded(coord.manager)
    finally:
        release.set()

    assert (await init).error == ErrorCode.not_coordinator
    assert txn_records(replicas, tp) == [(transactional_id, exhausted)]
    again = await coord.handle_init_producer_id(transactional_id, 1000, None)
    assert (again.error, again.producer_epoch) == (ErrorCode.none, 0)
    assert again.producer_id != exhausted.producer_id


# -- timed-out transactions --------------------------------------------------------------


async def test_a_producer_that_committed_and_began_again_during_the_pass_is_not_fenced(
    start: Started,
) -> None:
    replicas = txn_replicas()
    coord, markers, clock = await start(replicas)
    slow, healthy = ids_in_one_partition(2)
    await open_transaction(coord, slow)
    pid = await open_transaction(coord, healthy)
    clock.now += TIMEOUT_MS + 1  # both past their timeout

    async def commit_and_begin_again() -> None:
        # While the pass waits on the first abort, the second producer commits after
        # all, and begins its next transaction.
        assert await coord.handle_end_transaction(healthy, pid, 0, True) == ErrorCode.none
        await markers.finish(coord.manager)
        assert state_of(coord, healthy) == TransactionState.COMPLETE_COMMIT
        added = await coord.handle_add_partitions_to_transaction(healthy, pid, 0, [TP])
        assert added == ErrorCode.none

    aborted = await while_held(replicas, coord.abort_timed_out_transactions, commit_and_begin_again)

    assert aborted == 1
    assert state_of(coord, slow) == TransactionState.PREPARE_ABORT
    assert await coord.handle_end_transaction(healthy, pid, 0, True) == ErrorCode.none


async def test_a_transaction_completed_during_the_pass_does_not_end_it(
    start: Started,
) -> None:
    replicas = txn_replicas()
    coord, markers, clock = await start(replicas)
    slow, healthy, late = ids_in_one_partition(3)
    pids = {i: await open_transaction(coord, i) for i in (slow, healthy, late)}
    clock.now += TIMEOUT_MS + 1

    async def commit() -> None:
        assert await coord.handle_end_transaction(healthy, pids[healthy], 0, True) == (
            ErrorCode.none
        )
        await markers.finish(coord.manager)

    aborted = await while_held(replicas, coord.abort_timed_out_transactions, commit)

    assert aborted == 2
    assert [state_of(coord, i) for i in (slow, healthy, late)] == [
        TransactionState.PREPARE_ABORT,
        TransactionState.COMPLETE_COMMIT,
        TransactionState.PREPARE_ABORT,
    ]
