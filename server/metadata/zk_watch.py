"""Persistent watches built from ZooKeeper's one-shot ones, as kazoo's DataWatch and
ChildrenWatch build them, for ZooKeeperMetadataStore.

ZooKeeper (through kazoo 2.x) only has one-shot watches: a read sets one, the next change
fires it, and a reconnect drops it. A `ZkWatch` re-arms after each firing and after each
reconnect with a read that sets the next one, and compares what each read finds with what
the watcher was last told, so that changes made while no one-shot watch was armed (between
a firing and its re-arm, or while the connection was down) are still reported:

    state known to the watcher ──ZooKeeper event──▶ state the event implies
                                                        │ re-arming read
                                                        ▼
                                               state found: report the difference

A node's state, for this purpose, is `NodeVersion(czxid, counter)` or None when it does
not exist: czxid tells a re-created node from the old one; counter is the data version for
a data watch and the child version (cversion) for a children watch, and each goes up by
exactly one per change. Changes caught up this way are reported once per kind (several sets
become one CHANGED): callbacks only learn that something happened and read the new state.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any, Final, Protocol

from tiercel.config.logging_setup import log_event
from tiercel.server.metadata.store import EventType, WatchCallback, WatchEvent

__all__ = ["NodeVersion", "WatchKind", "ZkWatch", "catch_up", "follow"]

_log: Final = logging.getLogger("tiercel.metadata")
# A node created since the last read: its czxid is not in the event.
UNKNOWN_CZXID: Final = -1
# Pause between attempts to re-arm a watch whose read failed while connected.
_REARM_BACKOFF_S: Final = 0.1


class WatchKind(enum.Enum):
    DATA = "data"
    CHILDREN = "children"


@dataclass(frozen=True, slots=True)
class NodeVersion:
    """What a watch tracks of a node: its creation zxid and its data or child version."""

    czxid: int
    counter: int


NodeState = NodeVersion | None


def follow(kind: WatchKind, before: NodeState, zk_event: str) -> tuple[EventType | None, NodeState]:
    """What a ZooKeeper event (kazoo's EventType name) means to a watcher that knows `before`.

    Returns the event to deliver (None when the event tells this watcher nothing, or is
    stale: it contradicts `before`) and the state the node is in right after the event.
    """
    if zk_event == "CREATED":
        if before is None:
            return EventType.CREATED, NodeVersion(UNKNOWN_CZXID, 0)
        return None, before
    if before is None:
        return None, before
    if zk_event == "DELETED":
        return EventType.DELETED, None
    if zk_event == "CHANGED" and kind is WatchKind.DATA:
        return EventType.CHANGED, NodeVersion(before.czxid, before.counter + 1)
    if zk_event == "CHILD" and kind is WatchKind.CHILDREN:
        return EventType.CHILDREN_CHANGED, NodeVersion(before.czxid, before.counter + 1)
    return None, before


def catch_up(kind: WatchKind, implied: NodeState, found: NodeState) -> list[EventType]:
    """The events that take a watcher from `implied` to the `found` state of a later read."""
    if found is None:
        return [] if implied is None else [EventType.DELETED]
    events: list[EventType] = []
    base = 0
    if implied is None:
        events.append(EventType.CREATED)
    elif implied.czxid not in (UNKNOWN_CZXID, found.czxid):
        events += [EventType.DELETED, EventType.CREATED]
    else:
        base = implied.counter
    if found.counter > base:
        events.append(EventType.CHANGED if kind is WatchKind.DATA else EventType.CHILDREN_CHANGED)
    return events


class WatchArmer(Protocol):
    """What a ZkWatch needs of its store. Event-loop only."""

    async def arm(self, watch: ZkWatch) -> NodeState:
        """Read the node, leaving a one-shot watch that calls `watch.on_zk_event`; one try."""

    async def until_connected(self) -> None:
        """Return once the store is connected to ZooKeeper."""


class ZkWatch:
    """One registered watch (a WatchHandle).

    Invariants: `_known` is what the watcher has been told (or, before the first read, the
    unset sentinel); triggers (a ZooKeeper event's type, or None for "re-read") are handled
    one at a time, in arrival order, by one task: deliver the event if it follows from
    `_known`, re-arm with a read, deliver what that read shows beyond the event. A read that
    fails is retried once connected; the store also re-reads every watch after reconnecting.
    No callback runs after `cancel()`.

    Event-loop only, except `on_zk_event`, which kazoo calls on its connection thread.
    """

    _UNSET: Final = object()

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        armer: WatchArmer,
        path: str,
        kind: WatchKind,
        callback: WatchCallback,
    ) -> None:
        self.path = path
        self.kind = kind
        self._loop = loop
        self._armer = armer
        self._callback = callback
        self._active = True
        self._known: Any = self._UNSET
        self._triggers: deque[str | None] = deque([None])
        self._task: asyncio.Task[None] | None = None
        self.armed: asyncio.Future[None] = loop.create_future()
        self._start_task()

    def cancel(self) -> None:
        if not self._active:
            return
        self._active = False
        if self._task is not None:
            self._task.cancel()
        if not self.armed.done():
            self.armed.cancel()

    def on_zk_event(self, event: Any) -> None:
        """kazoo's watcher (connection thread): hand the event's type to the loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is listening
            self._loop.call_soon_threadsafe(self.trigger, str(event.type))

    def trigger(self, zk_event: str | None) -> None:
        """Queue a ZooKeeper event's type, or None to re-read (after a reconnect)."""
        if not self._active or zk_event == "NONE":
            # NONE: the connection dropped and took the one-shot watch; the store
            # triggers a re-read once it is back.
            return
        self._triggers.append(zk_event)
        if self._task is None:
            self._start_task()

    def _start_task(self) -> None:
        self._task = self._loop.create_task(self._drain(), name=f"zk-watch {self.path}")

    def _deliver_soon(self, event_type: EventType) -> None:
        self._loop.call_soon(self._deliver, WatchEvent(self.path, event_type))

    def _deliver(self, event: WatchEvent) -> None:
        # Checked at delivery so that no callback runs after cancel(), even one queued.
        if self._active:
            self._callback(event)

    async def _drain(self) -> None:
        try:
            while self._triggers and self._active:
                zk_event = self._triggers.popleft()
                implied = self._known
                if zk_event is not None and self._known is not self._UNSET:
                    delivered, implied = follow(self.kind, self._known, zk_event)
                    if delivered is not None:
                        self._deliver_soon(delivered)
                found = await self._rearm()
                if implied is not self._UNSET:
                    for event_type in catch_up(self.kind, implied, found):
                        self._deliver_soon(event_type)
                self._known = found
                if not self.armed.done():
                    self.armed.set_result(None)
        finally:
            self._task = None

    async def _rearm(self) -> NodeState:
        while True:
            try:
                return await self._armer.arm(self)
            except Exception as e:
                log_event(_log, logging.DEBUG, "zk_watch_rearm_failed", path=self.path, error=e)
            await asyncio.sleep(_REARM_BACKOFF_S)
            await self._armer.until_connected()
