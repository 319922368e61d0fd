"""Fixtures for the replication tests: a Scheduler on the test's loop, and clusters of
replicas whose logs are closed before it stops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from replication_support import CONFIG, Cluster, MakeCluster

from tiercel.config.log_config import LogConfig
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
