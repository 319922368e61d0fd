"""Time and timers for Raft (Kafka's ``Time`` and ``Timer``).

Every timeout of the Raft client (election, fetch, check-quorum, backoffs, parked
fetches) is a `Timer` on a `Time`, never an event-loop timer: the client computes how
long it may wait from its timers, and tests and the simulation drive a mock time.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["SystemTime", "Time", "Timer"]


class Time(Protocol):
    """A clock in milliseconds (Kafka's ``Time.milliseconds``)."""

    def milliseconds(self) -> int: ...


class SystemTime:
    """The wall clock, as Kafka's ``Time.SYSTEM``."""

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000


class Timer:
    """A deadline on a `Time` (Kafka's ``Timer``): ``update`` reads the clock (or takes
    the time given), ``reset`` starts a new timeout from the last update.

    Invariant: ``remaining_ms`` is never negative. Not thread-safe; one owner."""

    __slots__ = ("_current_ms", "_deadline_ms", "_time", "timeout_ms")

    def __init__(self, time_: Time, timeout_ms: int) -> None:
        self._time = time_
        self._current_ms = time_.milliseconds()
        self.timeout_ms = timeout_ms
        self._deadline_ms = self._current_ms + timeout_ms

    def update(self, current_ms: int | None = None) -> None:
        """Move the timer's clock forward (never backward) to ``current_ms``, or now."""
        now = self._time.milliseconds() if current_ms is None else current_ms
        self._current_ms = max(self._current_ms, now)

    def reset(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self._deadline_ms = self._current_ms + timeout_ms

    @property
    def is_expired(self) -> bool:
        return self._current_ms >= self._deadline_ms

    @property
    def remaining_ms(self) -> int:
        return max(0, self._deadline_ms - self._current_ms)
