"""Controlled shutdown, the broker's side, against real controllers on one store: the
broker's request makes the controller move its leaderships, the wait ends as soon as its
metadata shows none left that could move, and it is bounded when the controller does
not act."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from controller_support import Cluster, tp

from tiercel.config.broker_config import BrokerConfig, Listener
from tiercel.server.controller.controlled_shutdown import ControlledShutdown, movable_leaderships
from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.metadata_listener import MetadataListener
from tiercel.server.metadata.store import NodeExistsError
from tiercel.server.metadata.zk_store import ZooKeeperMetadataStore
from tiercel.server.partition import PartitionState


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await Cluster.open(tmp_path)
    yield c
    await c.close()


@pytest.fixture
async def cache(cluster: Cluster) -> AsyncIterator[MetadataCache]:
    """Broker 1's metadata, kept by a listener as the broker keeps it."""
    cache = MetadataCache(1, "cluster")

    async def on_topic(name: str, topic: TopicMetadata | None) -> None:
        return None

    listener = MetadataListener(cluster.store, cache, on_topic)
    await listener.start()
    yield cache
    await listener.stop()


def shutdown_of(
    cluster: Cluster, cache: MetadataCache, retries: int = 3, backoff_ms: int = 2000
) -> ControlledShutdown:
    config = BrokerConfig(
        {
            "node.id": 1,
            "controlled.shutdown.max.retries": retries,
            "controlled.shutdown.retry.backoff.ms": backoff_ms,
        }
    )
    return ControlledShutdown(config, cluster.store, cache)


def _cache_with(
    states: dict[int, PartitionState], brokers: tuple[int, ...], shutting_down: frozenset[int]
) -> MetadataCache:
    cache = MetadataCache(1, "cluster")
    replicas = {p: s.replicas for p, s in states.items()}
    cache.put_topic(TopicMetadata("t", uuid.uuid4(), replicas, states))
    cache.put_brokers({b: zk.BrokerRegistration(b, ()) for b in brokers}, shutting_down)
    return cache


def registration(broker: int) -> bytes:
    return zk.BrokerRegistration(broker, (Listener("PLAINTEXT", "127.0.0.1", broker),)).encode()


def test_only_leaderships_another_live_isr_member_could_take_count() -> None:
    states = {
        0: PartitionState(1, 0, (1, 2), (1, 2)),  # 2 can lead
        1: PartitionState(1, 0, (1,), (1, 2)),  # nobody else in sync
        2: PartitionState(1, 0, (1, 3), (1, 3)),  # 3 is not live
        3: PartitionState(2, 0, (2, 1), (2, 1)),  # not led by 1
        4: PartitionState(1, 0, (1, 4), (1, 4)),  # 4 is shutting down too
    }
    cache = _cache_with(states, brokers=(1, 2, 4), shutting_down=frozenset({1, 4}))
    assert movable_leaderships(cache, 1) == [tp("t", 0)]
    cache = _cache_with(states, brokers=(1, 2, 4), shutting_down=frozenset({1}))
    assert movable_leaderships(cache, 1) == [tp("t", 0), tp("t", 4)]


async def test_leaderships_move_before_the_broker_stops(
    cluster: Cluster, cache: MetadataCache
) -> None:
    for broker in (1, 2, 3):
        await cluster.start(broker)
    await cluster.create_topic("t", {0: (1, 2, 3), 1: (2, 1), 2: (1,)})
    for partition in range(3):
        await cluster.wait_state("t", lambda s: True, partition=partition)
    assert await cache.wait_until(
        lambda c: (t := c.topic("t")) is not None and len(t.states) == 3, 5
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await shutdown_of(cluster, cache).run()
    assert loop.time() - started < 1.0  # not a retry's backoff
    led = await cluster.state("t")
    assert led is not None and (led.leader, led.leader_epoch, led.isr) == (2, 1, (2, 3))
    followed = await cluster.state("t", 1)
    assert followed is not None and followed.isr == (2,)
    # Alone in its ISR: it stays.
    alone = await cluster.state("t", 2)
    assert alone is not None and alone.leader == 1
    # The request stays until the broker's session ends.
    assert cache.shutting_down == {1} and not cache.is_broker_isr_eligible(1)


async def test_the_wait_is_bounded_when_nothing_moves(
    cluster: Cluster, cache: MetadataCache
) -> None:
    for broker in (1, 2):
        await cluster.start(broker)
    await cluster.create_topic("t", {0: (1, 2)})
    await cluster.wait_state("t", lambda s: True)
    assert await cache.wait_until(lambda c: c.partition_state(tp("t")) is not None, 5)
    # No controller acts on the request any more.
    for broker in (1, 2):
        await cluster.controllers.pop(broker).shutdown()
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert not await shutdown_of(cluster, cache, retries=2, backoff_ms=200).run()
    assert 0.35 < loop.time() - started < 1.5
    state = await cluster.state("t")
    assert state is not None and state.leader == 1


async def test_a_request_of_another_session_than_the_registration_does_not_count(
    zk_connect: str,
) -> None:
    """As after a restart: broker 2 registered again in a new session while the request
    of its old session waits for that session to expire."""
    old, new = (ZooKeeperMetadataStore(zk_connect, session_timeout_ms=4000) for _ in "on")
    await old.start()
    await new.start()
    cache = MetadataCache(1, "cluster")

    async def on_topic(name: str, topic: TopicMetadata | None) -> None:
        return None

    listener = MetadataListener(new, cache, on_topic)
    try:
        for path in zk.PERSISTENT_PATHS:
            with contextlib.suppress(NodeExistsError):
                await old.create(path, make_parents=True)
        await listener.start()
        for broker in (2, 3):
            await old.create(zk.controlled_shutdown_path(broker), ephemeral=True)
        await new.create(zk.broker_path(2), registration(2), ephemeral=True)
        await old.create(zk.broker_path(3), registration(3), ephemeral=True)
        assert await cache.wait_until(lambda c: set(c.brokers) == {2, 3}, 5)
        assert await cache.wait_until(lambda c: c.shutting_down == {3}, 5)
        assert cache.is_broker_isr_eligible(2) and not cache.is_broker_isr_eligible(3)
    finally:
        await listener.stop()
        await old.close()
        await new.close()
