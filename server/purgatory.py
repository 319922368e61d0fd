"""Purgatory: requests waiting for something to happen to their partitions.

Event-loop only. A delayed operation (Kafka's DelayedFetch / DelayedProduce) watches a
set of partitions with a condition; whenever one of them changes (an append, a high
watermark advance) the purgatory re-checks the condition, and the operation completes
when it holds or when its timeout expires. Completion is a future the handler awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Final

from tiercel.storage.topic_partition import TopicPartition

_COMPLETED: Final = True


class DelayedOperation:
    __slots__ = ("check", "future", "keys", "timer")

    def __init__(
        self,
        keys: tuple[TopicPartition, ...],
        check: Callable[[], bool],
        future: asyncio.Future[bool],
    ) -> None:
        self.keys = keys
        self.check = check
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


class Purgatory:
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[TopicPartition, set[DelayedOperation]] = {}
        self._closed = False

    async def wait(
        self, keys: Iterable[TopicPartition], check: Callable[[], bool], timeout_s: float
    ) -> bool:
        """True once ``check()`` holds after a change to one of ``keys``; False on timeout.

        The caller has already found ``check()`` false; it is not re-run before waiting.
        Once the purgatory is closed (shutdown) nothing waits any more."""
        if self._closed:
            return check()
        loop = asyncio.get_running_loop()
        op = DelayedOperation(tuple(keys), check, loop.create_future())
        for key in op.keys:
            self._watchers.setdefault(key, set()).add(op)
        op.timer = loop.call_later(max(timeout_s, 0.0), self._expire, op)
        try:
            return await op.future
        finally:
            self._remove(op)

    async def try_complete_else_watch(
        self, keys: Iterable[TopicPartition], try_complete: Callable[[], bool], timeout_s: float
    ) -> bool:
        """Kafka's tryCompleteElseWatch: True if ``try_complete()`` holds now or after a
        change to one of ``keys`` within ``timeout_s``; False on timeout."""
        return try_complete() or await self.wait(keys, try_complete, timeout_s)

    def check_and_complete(self, key: TopicPartition) -> int:
        """Re-check the operations watching ``key``; returns how many completed."""
        watchers = self._watchers.get(key)
        if not watchers:
            return 0
        completed = 0
        for op in list(watchers):
            if not op.future.done() and op.check():
                op.future.set_result(_COMPLETED)
                self._remove(op)
                completed += 1
        return completed

    def close(self) -> None:
        """Shutdown: complete what waits, and let nothing wait from now on, so every
        request is answered with what it has."""
        self._closed = True
        self.complete_all()

    def complete_all(self) -> None:
        """Force-complete everything: handlers answer with what they have."""
        for watchers in list(self._watchers.values()):
            for op in list(watchers):
                if not op.future.done():
                    op.future.set_result(_COMPLETED)
                self._remove(op)

    def _expire(self, op: DelayedOperation) -> None:
        if not op.future.done():
            op.future.set_result(not _COMPLETED)
        self._remove(op)

    def _remove(self, op: DelayedOperation) -> None:
        if op.timer is not None:
            op.timer.cancel()
        for key in op.keys:
            watchers = self._watchers.get(key)
            if watchers is not None:
                watchers.discard(op)
                if not watchers:
                    del self._watchers[key]

    @property
    def watched(self) -> int:
        return sum(len(w) for w in self._watchers.values())
