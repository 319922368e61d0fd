"""The quorum controller's single queue of events (Kafka's ``KafkaEventQueue`` as the
controller uses it): every command, every Raft callback and every periodic task runs as
one event, in order, each to completion before the next starts, so the control managers
never see two of them interleaved."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

__all__ = ["ControllerEventQueue"]

_log = logging.getLogger(__name__)

Event = Callable[[], None]


class ControllerEventQueue:
    """Event-loop only. Events are synchronous callables; one that raises is logged and
    the queue goes on (an event completes its own futures, failures included)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._events: asyncio.Queue[tuple[str, Event]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    def append(self, name: str, event: Event) -> bool:
        """Queue ``event``; False (and nothing queued) once the queue is closed."""
        if self._closed:
            return False
        self._events.put_nowait((name, event))
        return True

    async def _run(self) -> None:
        while True:
            name, event = await self._events.get()
            try:
                event()
            except Exception:
                _log.exception("%s: event %s failed", self._name, name)

    async def close(self) -> None:
        """Stop taking events; those still queued are dropped."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
