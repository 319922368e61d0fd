"""Where the blocking file jobs of an owner on the event loop run, in order.

A `ProducerStateManager` writes and deletes snapshot files through a `SnapshotIo`. Its
loader, already in an executor thread, runs them at once (`BlockingSnapshotIo`); an open
log runs them one after another in the scheduler's executor (`ExecutorSnapshotIo`), so a
deletion never overtakes the write of the same file and the loop never waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from tiercel.storage.scheduler import Scheduler

__all__ = ["BlockingSnapshotIo", "ExecutorSnapshotIo", "Job", "SnapshotIo"]

Job = Callable[[], None]


class SnapshotIo(Protocol):
    """Where snapshot file jobs run: ``job`` (blocking), then ``then`` in the caller's
    context once it succeeded. Jobs run in the order they were submitted."""

    def submit(self, job: Job, then: Job | None = None) -> None: ...


class BlockingSnapshotIo:
    """Runs each job at once in the calling thread: for a loader, already off the loop."""

    def submit(self, job: Job, then: Job | None = None) -> None:
        job()
        if then is not None:
            then()


class ExecutorSnapshotIo:
    """Runs jobs in the scheduler's executor one after another, in submission order, so a
    deletion never overtakes the write of the same file. A failed job is logged by the
    scheduler and does not stop the ones after it. Event-loop only. Each job runs through
    ``guard`` (the log's I/O error handling, which takes a failing log dir offline)."""

    def __init__(
        self, scheduler: Scheduler, name: str, guard: Callable[[Job], Job] = lambda job: job
    ) -> None:
        self._scheduler = scheduler
        self._name = name
        self._guard = guard
        self._tail: asyncio.Task[None] | None = None

    def submit(self, job: Job, then: Job | None = None) -> None:
        self._tail = self._scheduler.spawn(self._run(self._tail, job, then), name=self._name)

    async def _run(self, previous: asyncio.Task[None] | None, job: Job, then: Job | None) -> None:
        if previous is not None:
            await asyncio.wait({previous})
        await self._scheduler.run_blocking(self._guard(job))
        if then is not None:
            then()

    async def drain(self) -> None:
        """Wait until every job submitted so far has run."""
        while self._tail is not None and not self._tail.done():
            await asyncio.wait({self._tail})
