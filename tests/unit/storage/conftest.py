"""Fixtures for the storage tests that need an event loop's Scheduler."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tiercel.storage.scheduler import Scheduler


@pytest.fixture
async def scheduler() -> AsyncIterator[Scheduler]:
    """A two-thread Scheduler on the test's loop; background work is drained at teardown."""
    s = Scheduler(asyncio.get_running_loop(), 2)
    yield s
    await s.drain()
    s.shutdown()
