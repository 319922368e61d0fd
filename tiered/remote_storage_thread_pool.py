"""The bounded pool remote reads run in (Kafka's RemoteStorageThreadPool).

Kafka runs each remote read as one task in a fixed pool of ``remote.log.reader.threads``
threads whose queue holds at most ``remote.log.reader.max.pending.tasks``; a submission
beyond that fails with RejectedExecutionException, which the fetch answers as an error
for the partition instead of queueing without bound. Here a remote read is a coroutine
that hops between the event loop (metadata lookups) and the pool (object-store I/O), so
the bound is taken per read: `try_reserve` admits a read when fewer than ``threads +
max_pending_tasks`` are in flight, `release` ends it, and `run` runs its calls in the
pool.

A read cancelled (its fetch stopped waiting, Kafka's DelayedRemoteFetch.onExpiration)
behaves as Kafka's ``Future.cancel(false)`` on the read's task: a call still queued
never runs, one running goes on to its end. Such a call keeps a place in the bound
until it returns, so the bound counts every call that holds or awaits a thread.

Thread contract: `try_reserve`, `release` and `run` are event-loop only; the executor
is any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from tiercel.tiered.daemon_thread_pool import DaemonThreadPoolExecutor

T = TypeVar("T")

__all__ = ["RejectedExecutionError", "RemoteStorageThreadPool"]

# remote.log.reader.threads and remote.log.reader.max.pending.tasks defaults (Kafka)
DEFAULT_READER_THREADS = 10
DEFAULT_MAX_PENDING_TASKS = 100


class RejectedExecutionError(Exception):
    """The pool is full (Kafka's RejectedExecutionException)."""


class RemoteStorageThreadPool:
    """Invariant: 0 <= ``in_flight`` <= ``threads + max_pending_tasks``."""

    def __init__(
        self,
        thread_name_prefix: str,
        threads: int = DEFAULT_READER_THREADS,
        max_pending_tasks: int = DEFAULT_MAX_PENDING_TASKS,
    ) -> None:
        if threads < 1 or max_pending_tasks < 1:
            raise ValueError(f"a pool needs threads ({threads}) and a queue ({max_pending_tasks})")
        self.threads = threads
        self.max_pending_tasks = max_pending_tasks
        self.executor = DaemonThreadPoolExecutor(threads, thread_name_prefix)
        self.in_flight = 0

    def try_reserve(self) -> None:
        """Admit one more task; RejectedExecutionError when the queue is full."""
        if self.in_flight >= self.threads + self.max_pending_tasks:
            raise RejectedExecutionError(
                f"{self.in_flight} remote reads in flight, at most {self.threads} running "
                f"and {self.max_pending_tasks} pending"
            )
        self.in_flight += 1

    def release(self) -> None:
        self.in_flight -= 1

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the pool, for a read admitted by `try_reserve`. Cancelled
        while waiting: dropped if it has not started; if it has, it runs on and holds a
        place of its own until it returns (the read's place goes when the read ends)."""
        future = self.executor.submit(fn, *args)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if not future.cancel():
                self.in_flight += 1
                loop = asyncio.get_running_loop()
                future.add_done_callback(lambda _: _call_soon(loop, self.release))
            raise

    def shutdown(self) -> None:
        """Accept nothing more and drop what is queued; calls running go on."""
        self.executor.shutdown(wait=False, cancel_futures=True)

    def join(self, timeout: float) -> bool:
        """*Blocking*: wait for the calls running, at most ``timeout`` seconds (Kafka's
        shutdownAndAwaitTermination); whether they all finished."""
        return self.executor.join(timeout)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    """From a pool thread; nothing to release once the loop is closed (shutdown)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)
