"""A broker's failed log dir through the store (Kafka's log-dir event notification): the
controller takes the broker's replicas in it offline — new leaders from the rest of the
live ISR with the epoch bumped, the broker out of the ISRs — and leaves its other
replicas alone; every broker's metadata lists them as offline replicas."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from controller_support import Cluster, eventually, tp

from tiercel.server.metadata.log_dir_event import LogDirEvent, propagate_log_dir_event
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.metadata_listener import MetadataListener


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await Cluster.open(tmp_path)
    yield c
    await c.close()


async def test_replicas_on_a_failed_dir_leave_the_isr_and_lose_their_leadership(
    cluster: Cluster,
) -> None:
    for broker in (1, 2, 3):
        await cluster.start(broker)
    await cluster.wait_active()
    # t-0 led by 2, t-1 followed by 2, t-2 only on 2, u-0 on 2 but in its healthy dir.
    await cluster.create_topic("t", {0: (2, 1, 3), 1: (1, 2, 3), 2: (2,)})
    await cluster.create_topic("u", {0: (2, 3, 1)})
    for partition in (0, 1, 2):
        await cluster.wait_state("t", lambda s: s.leader >= 0, partition)
    healthy = await cluster.wait_state("u", lambda s: s.leader == 2)

    event = LogDirEvent(2, "/data/a", (tp("t", 0), tp("t", 1), tp("t", 2)))
    await propagate_log_dir_event(cluster.store, event)

    moved = await cluster.wait_state("t", lambda s: s.leader != 2, 0)
    assert (moved.leader, moved.leader_epoch, moved.isr) == (1, 1, (1, 3))
    followed = await cluster.wait_state("t", lambda s: 2 not in s.isr, 1)
    assert (followed.leader, followed.leader_epoch, followed.isr) == (1, 1, (1, 3))
    # The only replica cannot be replaced: leaderless until broker 2 comes back with it.
    alone = await cluster.wait_state("t", lambda s: s.leader != 2, 2)
    assert (alone.leader, alone.leader_epoch, alone.isr) == (-1, 1, (2,))
    await asyncio.sleep(0.2)
    assert await cluster.state("u") == healthy

    # A new controller reads the events again and finds nothing left to change.
    active = await cluster.wait_active()
    await cluster.controllers.pop(active.node_id).shutdown()  # still registered
    assert (await cluster.wait_active()) is not active
    await asyncio.sleep(0.2)
    assert await cluster.state("t", 0) == moved


async def test_the_metadata_lists_replicas_on_failed_dirs_as_offline(cluster: Cluster) -> None:
    for broker in (1, 2):
        await cluster.register(broker)
    cache = MetadataCache(1, "cluster")

    async def on_topic(name: str, topic: TopicMetadata | None) -> None:
        return None

    listener = MetadataListener(cluster.store, cache, on_topic)
    await listener.start()
    try:
        await propagate_log_dir_event(cluster.store, LogDirEvent(2, "/data/a", (tp("t", 0),)))

        async def listed() -> bool:
            return cache.offline_replicas == {tp("t", 0): frozenset({2})}

        await eventually(listed)
    finally:
        await listener.stop()


async def test_an_offline_replica_is_not_elected_when_a_broker_returns(cluster: Cluster) -> None:
    for broker in (1, 2, 3):
        await cluster.start(broker)
    await cluster.wait_active()
    await cluster.create_topic("t", {0: (1, 2, 3)})
    await cluster.wait_state("t", lambda s: s.leader == 1)
    await cluster.stop(1)
    await cluster.stop(3)
    await cluster.wait_state("t", lambda s: (s.leader, s.isr) == (2, (2,)))
    # The last ISR member's dir fails: no leader, the ISR keeps it (as Kafka's).
    await propagate_log_dir_event(cluster.store, LogDirEvent(2, "/data/a", (tp("t", 0),)))
    await cluster.wait_state("t", lambda s: s.leader == -1)
    # Broker 1 returns: the offline-partition election sees broker 2 live and in the
    # ISR, but its replica is offline, so the partition stays leaderless.
    await cluster.start(1)
    await asyncio.sleep(0.3)
    state = await cluster.state("t")
    assert state is not None and state.leader == -1, state
