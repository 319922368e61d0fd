"""The broker's bounds on remote traffic (Kafka's RLMQuotaManager): a token bucket over
all partitions, one for copies (``remote.log.manager.copy.max.bytes.per.second``) and
one for remote fetches (``remote.log.manager.fetch.max.bytes.per.second``).

A copy is charged its whole segment before it starts, never per record: a bucket holds
at most one second of tokens, and a segment larger than that waits until the bucket is
full and then drives it negative, so the long-run rate still holds. A remote fetch is
charged what it read once it completes; while the bucket is empty (`exceeded`) a
consumer fetch below the local start gets no records and retries, as Kafka's
isRemoteLogFetchQuotaExceeded path answers. Event-loop only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["RLMQuota"]


class RLMQuota:
    def __init__(self, bytes_per_second: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = float(bytes_per_second)
        self._clock = clock
        self._tokens = self._rate
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._rate, self._tokens + (now - self._last) * self._rate)
        self._last = now

    def throttle_time_s(self, size: int) -> float:
        """How long a copy of ``size`` bytes must wait now (0: it may start)."""
        self._refill()
        needed = min(float(size), self._rate)
        return 0.0 if self._tokens >= needed else (needed - self._tokens) / self._rate

    def exceeded(self) -> bool:
        """Whether the bucket is spent (Kafka's getThrottleTimeMs() > 0)."""
        return self.throttle_time_s(1) > 0

    def record(self, size: int) -> None:
        self._refill()
        self._tokens -= size

    async def acquire(self, size: int) -> None:
        """Wait for the quota, then charge ``size`` bytes to it."""
        while (wait := self.throttle_time_s(size)) > 0:
            await asyncio.sleep(wait)
        self.record(size)
