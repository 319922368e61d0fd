"""Fixtures for the replication tests: a Scheduler on the test's loop, clusters of
replicas whose logs are closed before it stops, and broker 1's ReplicaManager."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from replication_support import CONFIG, Broker, Cluster, MakeCluster, StateStore

from tiercel.config.broker_config import BrokerConfig, Listener
from tiercel.config.log_config import LogConfig
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.metadata.zk_data import BrokerRegistration
from tiercel.server.replica_manager import ReplicaManager
from tiercel.storage.log_manager import LogManager
from tiercel.storage.scheduler import Scheduler


@pytest.fixture
async def scheduler() -> AsyncIterator[Scheduler]:
    s = Scheduler(asyncio.get_running_loop(), 2)
    yield s
    await s.drain()
    s.shutdown()


@pytest.fixture
async def make_cluster(tmp_path: Path, scheduler: Scheduler) -> AsyncIterator[MakeCluster]:
    made: list[Cluster] = []

    def make(
        ids: Sequence[int] = (1, 2), root: Path | None = None, config: LogConfig = CONFIG
    ) -> Cluster:
        cluster = Cluster(root or tmp_path, scheduler, ids, config)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        await cluster.close()
    await scheduler.drain()


# Broker 1's ReplicaManager: followers time out of the ISR after this.
RM_LAG_MS = 400


@pytest.fixture
async def broker(tmp_path: Path, scheduler: Scheduler) -> AsyncIterator[Broker]:
    config = BrokerConfig(
        {
            "node.id": 1,
            "log.dirs": [str(tmp_path / "logs")],
            "replica.lag.time.max.ms": RM_LAG_MS,
            "replica.fetch.backoff.ms": 50,
        }
    )
    log_manager = LogManager(config, scheduler, lambda topic: CONFIG)
    await log_manager.startup(None)
    cache = MetadataCache(1, "cluster")
    # Registered, but nobody listens there: a follower's fetcher keeps backing off.
    cache.put_brokers(
        {b: BrokerRegistration(b, (Listener("PLAINTEXT", "127.0.0.1", 1),)) for b in (1, 2, 3)}
    )
    store = StateStore()
    rm = ReplicaManager(config, 1, log_manager, scheduler, lambda topic: CONFIG, cache, store)
    rm.startup()
    yield Broker(rm, store)
    rm.shutdown()
    await rm.fetcher_manager.shutdown()
    await log_manager.shutdown()
