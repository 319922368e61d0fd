"""ReplicaManager in a cluster: leading and following from metadata, acks=all waiting for
the ISR, follower fetches (long polls answered by new data or a moved HW), the
ISR-expiration task, and replicas reassigned away."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from replication_support import TP, Broker, batch, values

from tiercel.protocol.errors import NotLeaderOrFollowerError
from tiercel.storage.log_values import FetchIsolation


async def test_acks_all_waits_for_every_isr_member(broker: Broker) -> None:
    await broker.apply(1, 0, (1, 2, 3), (1, 2, 3))
    produce = asyncio.create_task(broker.rm.append_records(5000, -1, {TP: batch(values(10))}))
    await asyncio.sleep(0.05)
    assert not produce.done()
    await broker.follower_fetch(2, 10)
    await asyncio.sleep(0.05)
    assert not produce.done()  # follower 3 has not fetched it yet
    await broker.follower_fetch(3, 10)
    (result,) = (await asyncio.wait_for(produce, 1)).values()
    assert result.error is None and result.info is not None
    assert result.info.first_offset == 0


async def test_acks_all_times_out_when_a_follower_stays_behind(broker: Broker) -> None:
    await broker.apply(1, 0, (1, 2), (1, 2))
    results = await broker.rm.append_records(100, -1, {TP: batch(values(3))})
    assert results[TP].error is not None
    assert results[TP].error.error_code.name == "request_timed_out"


async def test_follower_long_poll_ends_with_new_data(broker: Broker) -> None:
    await broker.apply(1, 0, (1, 2), (1, 2))
    poll = asyncio.create_task(broker.follower_fetch(2, 0, max_wait_ms=5000))
    await asyncio.sleep(0.05)
    assert not poll.done()
    await broker.rm.append_records(5000, 1, {TP: batch(values(4))})
    result = await asyncio.wait_for(poll, 1)
    assert result.read is not None and len(result.read.info.records) > 0


async def test_follower_long_poll_ends_when_the_hw_moves(broker: Broker) -> None:
    await broker.apply(1, 0, (1, 2, 3), (1, 2, 3))
    await broker.rm.append_records(5000, 1, {TP: batch(values(4))})
    first = await broker.follower_fetch(2, 4, max_wait_ms=0)
    assert first.read is not None and first.read.high_watermark == 0
    poll = asyncio.create_task(broker.follower_fetch(2, 4, max_wait_ms=5000))
    await asyncio.sleep(0.05)
    assert not poll.done()
    # Follower 3 catches up: the HW moves to 4, and follower 2 hears of it at once.
    last = await broker.follower_fetch(3, 4, max_wait_ms=5000)
    result = await asyncio.wait_for(poll, 1)
    assert result.read is not None and result.read.high_watermark == 4
    # Follower 3's own fetch moved the HW: it is answered with the new one, no wait.
    assert last.read is not None and last.read.high_watermark == 4


async def test_the_isr_expiration_task_shrinks_the_isr(broker: Broker) -> None:
    await broker.apply(1, 0, (1, 2), (1, 2))
    await broker.rm.append_records(5000, 1, {TP: batch(values(4))})
    async with asyncio.timeout(5):
        while broker.store.state is None or broker.store.state.isr != (1,):
            await asyncio.sleep(0.05)
    assert broker.rm.partitions[TP].isr == (1,)
    assert broker.rm.partitions[TP].log.high_watermark == 4


async def test_following_and_leading_move_the_partition_between_fetchers(broker: Broker) -> None:
    rm = broker.rm
    await broker.apply(2, 3, (2, 1), (2, 1))
    following = rm.fetcher_manager.fetch_state(TP)
    assert following is not None and following[0] == 2
    assert following[1].current_leader_epoch == 3
    with pytest.raises(NotLeaderOrFollowerError):
        rm.partitions[TP].read_records(0, 100, FetchIsolation.HIGH_WATERMARK, True, None)
    # An ISR change alone leaves the fetcher as it is.
    fetcher = rm.fetcher_manager.fetcher(2)
    await broker.apply(2, 3, (2,), (2, 1))
    assert rm.fetcher_manager.fetcher(2) is fetcher
    await broker.apply(3, 4, (3, 1), (2, 3, 1))
    assert rm.fetcher_manager.fetcher(2) is None  # idle fetchers stop
    following = rm.fetcher_manager.fetch_state(TP)
    assert following is not None and following[0] == 3
    await broker.apply(1, 5, (1, 3), (2, 3, 1))
    assert rm.fetcher_manager.fetch_state(TP) is None
    assert rm.partitions[TP].is_leader
    await broker.apply(-1, 6, (1,), (2, 3, 1))
    assert rm.fetcher_manager.fetch_state(TP) is None and not rm.partitions[TP].is_leader


async def test_a_replica_reassigned_away_is_deleted(broker: Broker) -> None:
    await broker.apply(2, 0, (2, 1), (2, 1))
    log_dir = broker.rm.partitions[TP].log.dir
    await broker.apply(2, 1, (2, 3), (2, 3))
    assert TP not in broker.rm.partitions
    assert broker.rm.fetcher_manager.fetch_state(TP) is None
    assert not Path(log_dir).exists()


async def test_a_failed_partition_is_fetched_again_only_for_a_new_leader_epoch(
    broker: Broker,
) -> None:
    """Kafka's applyLocalFollowersDelta restarts a follower's fetcher for a new leader
    epoch only, so a partition its fetcher marked failed stays out through an ISR
    change (which its own failure brings about) and is fetched again from the next
    epoch on."""
    rm = broker.rm
    await broker.apply(2, 3, (2, 1), (2, 1))
    fetcher = rm.fetcher_manager.fetcher(2)
    assert fetcher is not None
    # What the fetcher does on an unexpected error (markPartitionFailed).
    fetcher.remove_partitions([TP])
    fetcher.failed_partitions.add(TP)
    assert TP in rm.fetcher_manager.failed_partitions
    await broker.apply(2, 3, (2,), (2, 1))
    assert rm.fetcher_manager.fetch_state(TP) is None
    await broker.apply(2, 4, (2,), (2, 1))
    following = rm.fetcher_manager.fetch_state(TP)
    assert following is not None and following[1].current_leader_epoch == 4
    assert TP not in rm.fetcher_manager.failed_partitions
