"""Fixtures for the group coordinator tests: a Scheduler and an in-memory offsets topic."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from group_support import Clock, FakeReplicaManager, coordinator_config, start_coordinator

from tiercel.server.coordinator.group.group_config import GroupCoordinatorConfig
from tiercel.server.coordinator.group.group_coordinator import GroupCoordinator
from tiercel.storage.scheduler import Scheduler


@pytest.fixture
async def scheduler() -> AsyncIterator[Scheduler]:
    s = Scheduler(asyncio.get_running_loop(), 2)
    yield s
    await s.drain()
    s.shutdown()


@pytest.fixture
def replicas() -> FakeReplicaManager:
    return FakeReplicaManager()


@pytest.fixture
async def make_coordinator(
    replicas: FakeReplicaManager, scheduler: Scheduler
) -> AsyncIterator[Callable[..., Awaitable[GroupCoordinator]]]:
    """``await make(config, clock)``: a coordinator leading every offsets partition, shut
    down at teardown. Several share the same in-memory log (a restart)."""
    started: list[GroupCoordinator] = []

    async def make(
        config: GroupCoordinatorConfig | None = None, clock: Clock | None = None
    ) -> GroupCoordinator:
        coordinator = await start_coordinator(
            replicas, scheduler, config or coordinator_config(), clock or Clock()
        )
        started.append(coordinator)
        return coordinator

    yield make
    for coordinator in started:
        await coordinator.shutdown()
