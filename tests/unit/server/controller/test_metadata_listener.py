"""The broker's metadata listener misses no partition state: one the controller creates
while the listener reads the topic still reaches the cache (its watch is set before the
read). And it tells which brokers are shutting down."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from controller_support import Cluster, tp

from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.metadata_listener import MetadataListener
from tiercel.server.metadata.store import NoNodeError
from tiercel.server.partition import PartitionState


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await Cluster.open(tmp_path)
    yield c
    await c.close()


async def listening(cluster: Cluster) -> tuple[MetadataCache, MetadataListener]:
    cache = MetadataCache(1, "cluster")

    async def on_topic(name: str, topic: TopicMetadata | None) -> None:
        return None

    listener = MetadataListener(cluster.store, cache, on_topic)
    await listener.start()
    return cache, listener


async def test_a_state_created_while_the_topic_is_read_reaches_the_cache(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = cluster.store
    state_path = zk.partition_state_path("t", 0)
    real_get = store.get
    created: list[bool] = []

    async def get(path: str) -> Any:
        try:
            return await real_get(path)
        except NoNodeError:
            if path == state_path and not created:
                # The controller writes the first state right after this read missed it.
                created.append(True)
                await store.create(f"{zk.topic_path('t')}/partitions", b"")
                await store.create(zk.partition_path("t", 0), b"")
                await store.create(
                    state_path, zk.encode_partition_state(PartitionState(1, 0, (1,), (1,)))
                )
            raise

    monkeypatch.setattr(store, "get", get)
    cache, listener = await listening(cluster)
    try:
        await store.create(zk.topic_path("t"), zk.TopicAssignment(uuid.uuid4(), {0: (1,)}).encode())
        assert await cache.wait_until(lambda c: c.partition_state(tp("t")) is not None, 5)
        assert created
    finally:
        await listener.stop()


async def test_brokers_shutting_down_are_not_isr_eligible(cluster: Cluster) -> None:
    cache, listener = await listening(cluster)
    try:
        for broker in (1, 2):
            await cluster.register(broker)
        await cluster.request_shutdown(2)
        await cluster.request_shutdown(3)  # not registered: not counted
        assert await cache.wait_until(lambda c: c.shutting_down == {2}, 5)
        assert cache.is_broker_isr_eligible(1) and not cache.is_broker_isr_eligible(2)
        await cluster.deregister(2)
        assert await cache.wait_until(lambda c: not c.shutting_down and 2 not in c.brokers, 5)
    finally:
        await listener.stop()
