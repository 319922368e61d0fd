"""An executor of daemon threads for remote storage calls.

A call to an unreachable object store can hold its thread for minutes (a connect or read
timeout per attempt, several attempts). Python's ThreadPoolExecutor joins its threads at
interpreter exit, so one such call kept a broker process alive long after its shutdown
had finished; Kafka's remote storage pools are daemon threads (KafkaThread daemon) that a
shutdown waits for only a bounded time (RemoteLogManager.close, 10 s a pool). This
executor's threads are daemons, and `join` waits for its calls with a timeout.

A pool of background work (the copier's uploads) may run its threads at a lower CPU
priority (``nice``, Linux's per-thread nice value): they then take the cores the
event loop leaves idle rather than share them with it.

Thread-safe; started lazily, up to ``max_workers`` threads.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["DaemonThreadPoolExecutor"]

T = TypeVar("T")

_Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
_WorkItem = tuple["concurrent.futures.Future[Any]", _Call]


class DaemonThreadPoolExecutor(concurrent.futures.Executor):
    """Invariant: ``_unfinished`` counts the calls submitted and neither finished nor
    cancelled; no call is accepted after `shutdown`."""

    def __init__(self, max_workers: int, thread_name_prefix: str, nice: int = 0) -> None:
        if max_workers < 1:
            raise ValueError(f"a pool needs threads ({max_workers})")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._nice = nice
        self._queue: queue.SimpleQueue[_WorkItem | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._unfinished = 0
        self._shutdown = False

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._unfinished += 1
            self._queue.put((future, (fn, args, kwargs)))
            if len(self._threads) < min(self._max_workers, self._unfinished):
                thread = threading.Thread(
                    target=self._work, name=f"{self._prefix}_{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return future

    def _work(self) -> None:
        if self._nice and sys.platform == "linux":
            # On Linux a thread id names one thread; elsewhere it would be the process.
            # A sandbox that refuses the call costs the priority, not the thread (one
            # that died here would leave its calls queued for good).
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._nice)
        while (item := self._queue.get()) is not None:
            future, (fn, args, kwargs) = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as e:
                    future.set_exception(e)
                else:
                    future.set_result(result)
            del item, future  # no reference to a result kept while idle
            with self._lock:
                self._unfinished -= 1
                self._idle.notify_all()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if not self._shutdown and cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
                        self._unfinished -= 1
                self._idle.notify_all()
            self._shutdown = True
            for _ in self._threads:
                self._queue.put(None)  # after the calls still queued
        if wait:
            self.join(None)

    def join(self, timeout: float | None) -> bool:
        """*Blocking*: wait until no call is running or queued, at most ``timeout``
        seconds (None: no limit); whether that happened."""
        with self._lock:
            return self._idle.wait_for(lambda: self._unfinished == 0, timeout)
