"""Fixtures for the RemoteLogManager tests: a Scheduler on the test's loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tiercel.storage.scheduler import Scheduler


@pytest.fixture
async def scheduler() -> AsyncIterator[Scheduler]:
    s = Scheduler(asyncio.get_running_loop(), 2)
    yield s
    await s.drain()
    s.shutdown()
