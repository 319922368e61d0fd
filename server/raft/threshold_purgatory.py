"""Waiters parked until a value (the log end, the high watermark) reaches their
threshold, or until completed all at once, or their time runs out (Kafka's ``ThresholdPurgatory``).

Kafka expires waiters from a timer thread; here the Raft client's poll expires them,
its wait bounded by `next_deadline_ms`, so a mock time drives them as it drives every
other Raft timer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.errors import RequestTimedOutError

__all__ = ["ThresholdPurgatory"]

NO_DEADLINE: Final = 2**63 - 1

Callback = Callable[[int | None, BaseException | None], None]


@dataclass(slots=True)
class _Waiter:
    threshold: int
    deadline_ms: int
    callback: Callback


class ThresholdPurgatory:
    """Event-loop only. A callback runs once: with the completion time, or with
    RequestTimedOutError at its deadline, or with the error it is failed with."""

    def __init__(self) -> None:
        self._waiters: dict[int, _Waiter] = {}
        self._ids = itertools.count()

    def await_(self, threshold: int, deadline_ms: int, callback: Callback) -> None:
        self._waiters[next(self._ids)] = _Waiter(threshold, deadline_ms, callback)

    def maybe_complete(self, value: int, now: int) -> None:
        """Complete every waiter whose threshold is <= ``value``, oldest first."""
        ready = [k for k, w in self._waiters.items() if w.threshold <= value]
        for key in ready:
            waiter = self._waiters.pop(key, None)
            if waiter is not None:
                waiter.callback(now, None)

    def complete_all(self, now: int) -> None:
        """Complete every waiter, oldest first."""
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.callback(now, None)

    def expire(self, now: int) -> None:
        expired = [k for k, w in self._waiters.items() if w.deadline_ms <= now]
        for key in expired:
            waiter = self._waiters.pop(key, None)
            if waiter is not None:
                waiter.callback(None, RequestTimedOutError("Request timed out in purgatory"))

    def complete_all_exceptionally(self, error: BaseException) -> None:
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.callback(None, error)

    @property
    def next_deadline_ms(self) -> int:
        return min((w.deadline_ms for w in self._waiters.values()), default=NO_DEADLINE)

    @property
    def num_waiting(self) -> int:
        return len(self._waiters)
