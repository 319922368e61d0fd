"""A TxnOffsetCommit's offsets are pending from the moment their records are appended,
not from the write's answer (Kafka's GroupMetadata.prepareTxnOffsetCommit): the
producer's ABORT marker, appended after them, can complete first (the same high
watermark advance acknowledges both writes), and must find them to drop them. A COMMIT
that comes first commits nothing, as Kafka refuses it; a failed write leaves nothing.

Before, they were registered only once the acks=-1 write returned: an ABORT that
completed first found nothing, and the offsets stayed pending until the producer's
next marker, which committed them if that transaction committed (a consume-transform-
produce job then skipped the aborted transaction's input).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from group_support import NOW, FakeReplicaManager

from tiercel.protocol.errors import ErrorCode, NotEnoughReplicasError
from tiercel.server.coordinator.group.group_coordinator import GroupCoordinator
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata
from tiercel.storage.topic_partition import TopicPartition

MakeCoordinator = Callable[..., Awaitable[GroupCoordinator]]
GROUP = "eos"
INPUT = TopicPartition("in", 0)
PRODUCER_ID = 11


async def txn_commit(c: GroupCoordinator, offset: int) -> ErrorCode:
    """TxnOffsetCommit v0-2 (no member): the group's offset of INPUT in the producer's
    transaction."""
    result = await c.commit_transactional_offsets(
        "txn-id",
        GROUP,
        PRODUCER_ID,
        0,
        "",
        None,
        -1,
        {INPUT: OffsetAndMetadata(offset, -1, "", NOW)},
    )
    return result[INPUT]


def transaction_ended(c: GroupCoordinator, committed: bool) -> None:
    """The producer's marker reached the group's __consumer_offsets partition."""
    c.on_transaction_completed(PRODUCER_ID, [c.partition_for(GROUP)], committed)


def committed(c: GroupCoordinator) -> int | None:
    error, offsets = c.fetch_offsets(GROUP, [INPUT])
    assert error is ErrorCode.none
    found = offsets[INPUT]
    return None if found is None else found.committed_offset


async def test_an_abort_completing_before_the_write_is_answered_drops_the_offsets(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    release = replicas.hold()
    commit = asyncio.ensure_future(txn_commit(c, 20))
    try:
        async with asyncio.timeout(10):
            await replicas.held.wait()  # the records are in the log, not yet replicated
        # The transaction coordinator aborts the transaction (a timeout, say); its
        # ABORT marker lands after the records and completes first.
        transaction_ended(c, committed=False)
    finally:
        release.set()
    assert await commit == ErrorCode.none

    assert not c.manager.txn_offsets.is_pending(GROUP, INPUT)
    # The producer's next transaction commits other offsets, never the aborted ones.
    transaction_ended(c, committed=True)
    assert committed(c) is None
    assert await txn_commit(c, 30) == ErrorCode.none
    transaction_ended(c, committed=True)
    assert committed(c) == 30


async def test_a_failed_write_leaves_nothing_pending(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    replicas.fail_with = NotEnoughReplicasError("isr")
    assert await txn_commit(c, 20) == ErrorCode.coordinator_not_available
    assert not c.manager.txn_offsets.is_pending(GROUP, INPUT)
    replicas.fail_with = None
    transaction_ended(c, committed=True)
    assert committed(c) is None


async def test_a_commit_before_the_write_is_answered_commits_nothing(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    """Only a client that ends its transaction without waiting for its TxnOffsetCommit
    does this; Kafka's GroupMetadata.completePendingTxnOffsetCommit refuses it
    (IllegalStateException) and the offsets are not committed."""
    c = await make_coordinator()
    release = replicas.hold()
    commit = asyncio.ensure_future(txn_commit(c, 20))
    try:
        async with asyncio.timeout(10):
            await replicas.held.wait()
        transaction_ended(c, committed=True)
    finally:
        release.set()
    assert await commit == ErrorCode.none
    assert committed(c) is None
    assert not c.manager.txn_offsets.is_pending(GROUP, INPUT)
