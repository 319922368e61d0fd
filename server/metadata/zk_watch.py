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

    def arm(self, watch: ZkWatch) -> asyncio.Future[NodeState]:
        """Send, now, a read of the node that leaves a one-shot watch calling
        `watch.on_zk_event`; the future settles in the loop callback that receives the reply
        (one try)."""

    async def until_connected(self) -> None:
        """Return once the store is connected to ZooKeeper."""


class ZkWatch:
    """One registered watch (a WatchHandle).

    Invariants: `_known` is what the watcher has been told (or, before the first read, the
    unset sentinel); `_read` is the re-arming read in flight, `_retry` the wait before a
    failed one is sent again (at most one of them is set). A trigger (a ZooKeeper event's
    type, or None for "re-read") that arrives while neither is set is handled at once:
    deliver the event if it follows from `_known`, send the re-arming read; when its reply
    arrives, deliver what it shows beyond the event. Triggers that arrive meanwhile wait
    and are handled in arrival order. The store also re-reads every watch after
    reconnecting. No callback runs after `cancel()`.

    Order across watches: the connection thread posts replies and events to the loop in
    ZooKeeper's order (zk_client), and a reply's future runs its callbacks one loop turn
    later; events also wait one turn (`_arrived`), so that triggers and replies are
    handled, and their events delivered, in ZooKeeper's order (e.g. DataTree.createNode
    fires the node's watch before its parent's child watch). A task per watch would
    deliver in the order its steps get to run instead.

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
        self._waiting: deque[str | None] = deque()
        self._read: asyncio.Future[NodeState] | None = None
        self._retry: asyncio.Task[None] | None = None
        self.armed: asyncio.Future[None] = loop.create_future()
        self._send_read()

    def cancel(self) -> None:
        if not self._active:
            return
        self._active = False
        if self._read is not None:
            self._read.cancel()
        if self._retry is not None:
            self._retry.cancel()
        if not self.armed.done():
            self.armed.cancel()

    def on_zk_event(self, event: Any) -> None:
        """kazoo's watcher (connection thread): hand the event's type to the loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is listening
            self._loop.call_soon_threadsafe(self._arrived, str(event.type))

    def _arrived(self, zk_event: str) -> None:
        # One more turn, as a read's reply takes (see the class docstring).
        self._loop.call_soon(self.trigger, zk_event)

    def trigger(self, zk_event: str | None) -> None:
        """Handle a ZooKeeper event's type, or None to re-read (after a reconnect)."""
        if not self._active or zk_event == "NONE":
            # NONE: the connection dropped and took the one-shot watch; the store
            # triggers a re-read once it is back.
            return
        if self._read is not None or self._retry is not None or self._known is self._UNSET:
            self._waiting.append(zk_event)
            return
        self._handle(zk_event)

    def _handle(self, zk_event: str | None) -> None:
        if zk_event is not None:
            delivered, self._known = follow(self.kind, self._known, zk_event)
            if delivered is not None:
                self._deliver_soon(delivered)
        self._send_read()

    def _send_read(self) -> None:
        try:
            read = self._armer.arm(self)
        except Exception as e:
            self._read_failed(e)
            return
        self._read = read
        read.add_done_callback(self._on_read)

    def _on_read(self, read: asyncio.Future[NodeState]) -> None:
        if read is not self._read or not self._active:
            return
        self._read = None
        error = read.exception()
        if error is not None:
            self._read_failed(error)
            return
        found = read.result()
        if self._known is not self._UNSET:
            for event_type in catch_up(self.kind, self._known, found):
                self._deliver_soon(event_type)
        self._known = found
        if not self.armed.done():
            self.armed.set_result(None)
        if self._waiting:
            self._handle(self._waiting.popleft())

    def _read_failed(self, error: BaseException) -> None:
        log_event(_log, logging.DEBUG, "zk_watch_rearm_failed", path=self.path, error=error)
        self._retry = self._loop.create_task(self._send_later(), name=f"zk-watch {self.path}")

    async def _send_later(self) -> None:
        await asyncio.sleep(_REARM_BACKOFF_S)
        await self._armer.until_connected()
        self._retry = None
        if self._active:
            self._send_read()

    def _deliver_soon(self, event_type: EventType) -> None:
        self._loop.call_soon(self._deliver, WatchEvent(self.path, event_type))

    def _deliver(self, event: WatchEvent) -> None:
        # Checked at delivery so that no callback runs after cancel(), even one queued.
        if self._active:
            self._callback(event)
