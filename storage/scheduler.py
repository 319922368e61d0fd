"""Where blocking storage work runs: the executor, off the event loop.

`Scheduler` is handed to every `UnifiedLog`; it runs fsyncs, renames, deletions and scans in
a thread pool and posts the results back to the loop. `CoalescingWriter` writes the
latest snapshot of some state (a checkpoint file) with at most one write in flight:
requests made during a write cause exactly one more write, never a stale one after a
fresh one.

Both are event-loop only: their methods are called on the loop; the functions they are
given run in the executor and must not touch loop-owned state.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final, Generic, TypeVar

from tiercel.config.logging_setup import log_event

T = TypeVar("T")
_log: Final = logging.getLogger("tiercel.scheduler")


class Scheduler:
    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int) -> None:
        self.loop = loop
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="tiercel-io"
        )
        self._tasks: set[asyncio.Future[Any]] = set()
        self._timers: set[asyncio.TimerHandle] = set()

    def run_blocking(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return self.loop.run_in_executor(self._executor, fn, *args)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """A background task whose failure is logged, not lost."""
        task = self.loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def run_blocking_in_background(self, fn: Callable[..., Any], *args: Any, name: str) -> None:
        async def run() -> None:
            await self.run_blocking(fn, *args)

        self.spawn(run(), name)

    def call_later(self, delay_s: float, fn: Callable[[], Any]) -> asyncio.TimerHandle:
        """Run ``fn`` on the loop after ``delay_s``, unless the scheduler shuts down first."""

        def fire() -> None:
            self._timers.discard(handle)
            fn()

        handle = self.loop.call_later(delay_s, fire)
        self._timers.add(handle)
        return handle

    def _finished(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            name = task.get_name() if isinstance(task, asyncio.Task) else "?"
            log_event(
                _log,
                logging.ERROR,
                "background_task_failed",
                task=name,
                reason=repr(task.exception()),
            )

    async def drain(self) -> None:
        """Wait for the background work started so far."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def shutdown(self) -> None:
        """Drop the delayed work not yet due and stop the executor once its running jobs end.

        Delayed work is dropped as Kafka's KafkaScheduler.shutdown drops it (its executor
        does not run delayed tasks after shutdown): a segment whose files were renamed to
        ``.deleted`` is removed by the log loader at the next start instead. Left
        scheduled, such a timer would fire on a loop whose executor is gone."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        self._executor.shutdown(wait=True)


class CoalescingWriter(Generic[T]):
    def __init__(
        self,
        scheduler: Scheduler,
        snapshot: Callable[[], T],
        write: Callable[[T], object],
        name: str,
    ) -> None:
        self._scheduler = scheduler
        self._snapshot = snapshot
        self._write = write
        self._name = name
        self._in_flight: asyncio.Future[object] | None = None
        self._pending = False

    def request(self) -> None:
        """Write the current state soon."""
        if self._in_flight is not None:
            self._pending = True
            return
        self._start()

    def _start(self) -> None:
        self._pending = False
        future = self._scheduler.run_blocking(self._write, self._snapshot())
        self._in_flight = future
        future.add_done_callback(self._done)

    def _done(self, future: asyncio.Future[object]) -> None:
        self._in_flight = None
        if not future.cancelled() and future.exception() is not None:
            log_event(
                _log,
                logging.ERROR,
                "checkpoint_write_failed",
                file=self._name,
                reason=repr(future.exception()),
            )
        if self._pending:
            self._start()

    async def flush(self) -> None:
        """Write the state as it is now and wait until it is durable."""
        while self._in_flight is not None:
            await asyncio.wait({self._in_flight})
        self._start()
        await self._current()

    def _current(self) -> asyncio.Future[object]:
        assert self._in_flight is not None
        return self._in_flight
