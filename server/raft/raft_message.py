"""The messages the Raft client exchanges (Kafka's ``RaftRequest``/``RaftResponse`` and
``RaftMessageQueue``), with kio entities of the latest version as their data.

A `Completion` is the CompletableFuture of Kafka's code as the client uses it: whoever
completes it runs its callbacks at once. Inbound requests complete with the response
entity; outbound requests with the response (or an error), which the client queues for
its next poll.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from tiercel.server.raft.endpoints import Node

__all__ = [
    "AsyncMessageQueue",
    "Completion",
    "InboundRequest",
    "InboundResponse",
    "OutboundRequest",
    "RaftMessage",
    "RaftMessageQueue",
    "api_key_of",
]

T = TypeVar("T")


class Completion(Generic[T]):
    """Completes once; callbacks run synchronously in the completing call, or at once
    when added after completion. Event-loop only."""

    __slots__ = ("_callbacks", "_done", "_error", "_value")

    def __init__(self) -> None:
        self._callbacks: list[Callable[[T | None, BaseException | None], None]] = []
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done

    def when_complete(self, callback: Callable[[T | None, BaseException | None], None]) -> None:
        if self._done:
            callback(self._value, self._error)
        else:
            self._callbacks.append(callback)

    def complete(self, value: T) -> bool:
        return self._finish(value, None)

    def complete_exceptionally(self, error: BaseException) -> bool:
        return self._finish(None, error)

    def _finish(self, value: T | None, error: BaseException | None) -> bool:
        if self._done:
            return False
        self._done, self._value, self._error = True, value, error
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(value, error)
        return True


def api_key_of(data: Any) -> int:
    return int(data.__api_key__)


@dataclass(slots=True)
class InboundRequest:
    """A request for this replica (Kafka's RaftRequest.Inbound); ``completion`` takes the
    response entity, in the request's latest-version form."""

    correlation_id: int
    api_version: int
    data: Any
    listener_name: str
    created_ms: int
    completion: Completion[Any] = field(default_factory=Completion)


@dataclass(slots=True)
class OutboundRequest:
    """A request this replica sends (Kafka's RaftRequest.Outbound)."""

    correlation_id: int
    data: Any
    destination: Node
    created_ms: int
    completion: Completion[InboundResponse] = field(default_factory=Completion)


@dataclass(frozen=True, slots=True)
class InboundResponse:
    """An answer to one of this replica's requests (Kafka's RaftResponse.Inbound)."""

    correlation_id: int
    data: Any
    source: Node


RaftMessage = InboundRequest | InboundResponse


class RaftMessageQueue(Protocol):
    """Where the client's poll waits (Kafka's RaftMessageQueue)."""

    async def poll(self, timeout_ms: int) -> RaftMessage | None: ...
    def add(self, message: RaftMessage) -> None: ...
    @property
    def is_empty(self) -> bool: ...
    def wakeup(self) -> None: ...


class AsyncMessageQueue:
    """The real queue (Kafka's BlockingMessageQueue): ``poll`` waits for a message, a
    wakeup or the timeout without blocking the loop. Event-loop only."""

    def __init__(self) -> None:
        self._queue: collections.deque[RaftMessage] = collections.deque()
        self._ready = asyncio.Event()

    async def poll(self, timeout_ms: int) -> RaftMessage | None:
        if not self._queue and timeout_ms > 0:
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    await self._ready.wait()
            except TimeoutError:
                pass
        self._ready.clear()
        if self._queue:
            if len(self._queue) > 1:
                self._ready.set()  # more to take without waiting
            return self._queue.popleft()
        return None

    def add(self, message: RaftMessage) -> None:
        self._queue.append(message)
        self._ready.set()

    @property
    def is_empty(self) -> bool:
        return not self._queue

    def wakeup(self) -> None:
        self._ready.set()
