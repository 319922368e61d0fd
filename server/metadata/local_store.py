"""LocalMetadataStore: the embedded MetadataStore, kept in one JSON file in a directory.

Persistent nodes live in memory (`_Tree`) and, durably, in the file that
`local_store_file` reads and rewrites atomically; ephemeral nodes only in memory. Every
mutation is applied to memory at once and returns once a rewrite including it is on
disk; one writer task coalesces rewrites.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import TypeVar, assert_never

from tiercel.server.metadata.local_store_file import (
    FILE_NAME,
    CorruptMetadataStoreError,
    Node,
    StoreFile,
    now_ms,
    split,
)
from tiercel.server.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStore,
    MetadataStoreError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    OpResult,
    SetOp,
    Stat,
    WatchCallback,
    WatchEvent,
    WatchHandle,
    check_path,
)

__all__ = ["FILE_NAME", "CorruptMetadataStoreError", "LocalMetadataStore"]

_T = TypeVar("_T")
logger = logging.getLogger(__name__)


class _Tree:
    """The nodes in memory, with each node's child names.

    Invariants: '/' is present; every other node's parent is present and lists the node's
    name; ephemeral nodes have no children; `Node`s are immutable, so a shallow copy of
    `nodes` is a consistent snapshot; `last_czxid` is greater than every node's czxid and
    than those of earlier opens of the store (it starts from the clock, as zxids only
    grow). Event-loop only.
    """

    __slots__ = ("children", "last_czxid", "nodes")

    def __init__(self, nodes: dict[str, Node]) -> None:
        self.nodes = nodes
        self.last_czxid = time.time_ns()
        self.children: dict[str, set[str]] = {path: set() for path in nodes}
        for path in nodes:
            if path != "/":
                parent, name = split(path)
                self.children[parent].add(name)

    def stat(self, path: str) -> Stat:
        node = self.nodes[path]
        children = len(self.children[path])
        return Stat(
            node.version, node.ctime, node.mtime, node.ephemeral_owner, children, node.czxid
        )

    def insert(self, path: str, node: Node) -> None:
        self.nodes[path] = node
        self.children[path] = set()
        parent, name = split(path)
        self.children[parent].add(name)

    def remove(self, path: str) -> None:
        del self.nodes[path]
        del self.children[path]
        parent, name = split(path)
        self.children[parent].discard(name)

    def put(self, path: str, node: Node) -> None:
        self.nodes[path] = node


class _Edit:
    """Changes applied to a _Tree one by one, and undone together by `rollback()`.

    Also records the watch events they cause and whether a persistent node changed (changes
    to ephemeral nodes need no file write). Errors carry `op_index` (set by multi).
    Event-loop only.
    """

    def __init__(self, tree: _Tree, session_id: int, now_ms: int) -> None:
        self._tree = tree
        self._session_id = session_id
        self._now_ms = now_ms
        self._undo: list[Callable[[], None]] = []
        self.events: list[WatchEvent] = []
        self.persistent = False
        self.op_index: int | None = None

    def rollback(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        self.events.clear()

    def apply(self, op: Op) -> OpResult:
        match op:
            case CreateOp():
                return self.create(op.path, op.data, ephemeral=op.ephemeral, make_parents=False)
            case SetOp():
                return self.set(op.path, op.data, op.expected_version)
            case DeleteOp():
                self.delete(op.path, op.expected_version, recursive=False)
                return None
            case CheckOp():
                self._node(op.path, op.expected_version)
                return None
            case _:
                assert_never(op)

    def create(self, path: str, data: bytes, *, ephemeral: bool, make_parents: bool) -> str:
        if path in self._tree.nodes:
            raise NodeExistsError(path, op_index=self.op_index)
        parent, _ = split(path)
        parent_node = self._tree.nodes.get(parent)
        if parent_node is None:
            if not make_parents:
                raise NoNodeError(path, op_index=self.op_index)
            self.create(parent, b"", ephemeral=False, make_parents=True)
        elif parent_node.ephemeral_owner:
            raise NoChildrenForEphemeralsError(path, op_index=self.op_index)
        owner = self._session_id if ephemeral else 0
        self._tree.last_czxid += 1
        node = Node(bytes(data), 0, self._now_ms, self._now_ms, owner, self._tree.last_czxid)
        self._tree.insert(path, node)
        self._undo.append(partial(self._tree.remove, path))
        self.persistent |= not ephemeral
        self.events.append(WatchEvent(path, EventType.CREATED))
        self.events.append(WatchEvent(parent, EventType.CHILDREN_CHANGED))
        return path

    def set(self, path: str, data: bytes, expected_version: int) -> Stat:
        node = self._node(path, expected_version)
        updated = replace(node, data=bytes(data), version=node.version + 1, mtime=self._now_ms)
        self._tree.put(path, updated)
        self._undo.append(partial(self._tree.put, path, node))
        self.persistent |= not node.ephemeral_owner
        self.events.append(WatchEvent(path, EventType.CHANGED))
        return self._tree.stat(path)

    def delete(self, path: str, expected_version: int, *, recursive: bool) -> None:
        if path == "/":
            raise ValueError("the root node cannot be deleted")
        self._node(path, expected_version)
        if self._tree.children[path] and not recursive:
            raise NotEmptyError(path, op_index=self.op_index)
        self._remove_subtree(path)

    def _remove_subtree(self, path: str) -> None:
        for name in sorted(self._tree.children[path]):
            self._remove_subtree(f"{path}/{name}")
        node = self._tree.nodes[path]
        self._tree.remove(path)
        self._undo.append(partial(self._tree.insert, path, node))
        self.persistent |= not node.ephemeral_owner
        self.events.append(WatchEvent(path, EventType.DELETED))
        self.events.append(WatchEvent(split(path)[0], EventType.CHILDREN_CHANGED))

    def _node(self, path: str, expected_version: int) -> Node:
        """The node at `path`, checked against `expected_version` (-1: any)."""
        node = self._tree.nodes.get(path)
        if node is None:
            raise NoNodeError(path, op_index=self.op_index)
        if expected_version != -1 and expected_version != node.version:
            raise BadVersionError(path, op_index=self.op_index)
        return node


class _LocalWatch:
    """A registration in a path → watches registry. Event-loop only."""

    __slots__ = ("_active", "_callback", "_path", "_registry")

    def __init__(
        self, registry: dict[str, dict[_LocalWatch, None]], path: str, callback: WatchCallback
    ) -> None:
        self._registry = registry
        self._path = path
        self._callback = callback
        self._active = True
        registry.setdefault(path, {})[self] = None

    def cancel(self) -> None:
        if not self._active:
            return
        self._active = False
        watches = self._registry.get(self._path)
        if watches is not None:
            watches.pop(self, None)
            if not watches:
                del self._registry[self._path]

    def deliver(self, event: WatchEvent) -> None:
        # Checked at delivery so that no callback runs after cancel(), even one already queued.
        if self._active:
            self._callback(event)


class LocalMetadataStore(MetadataStore):
    """The embedded MetadataStore: every node in memory, persistent ones in `directory`.

    Invariants: memory holds the latest state and reads see it at once. Mutations of
    persistent nodes are numbered (`_applied_seq`); `_durable_seq` is the highest number the
    file holds. A mutation returns, and the watch events of it and of everything after it are
    delivered, only once the file holds it. One writer task rewrites the file; each write
    covers every mutation made before it began, so a burst of mutations shares few fsyncs.
    Ephemeral nodes live only in memory and vanish on close or restart. A failed write fails
    the store (fail-stop, since memory is then ahead of the file): waiting and later calls
    raise MetadataStoreError. Event-loop only; file I/O runs in the loop's default executor.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._file = StoreFile(os.fspath(directory))
        self._tree: _Tree | None = None
        self._open = False
        self._failure: Exception | None = None
        self._session_id = 0
        self._applied_seq = 0
        self._durable_seq = 0
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._undelivered: deque[tuple[int, _LocalWatch, WatchEvent]] = deque()
        self._data_watches: dict[str, dict[_LocalWatch, None]] = {}
        self._children_watches: dict[str, dict[_LocalWatch, None]] = {}

    @property
    def session_id(self) -> int:
        self._live_tree()
        return self._session_id

    async def start(self) -> None:
        if self._open:
            raise MetadataStoreError("metadata store is already started")
        loop = asyncio.get_running_loop()
        tree = _Tree(await loop.run_in_executor(None, self._file.open))
        self._tree = tree
        self._failure = None
        self._session_id = 1 + secrets.randbelow(2**63 - 1)
        self._applied_seq = self._durable_seq = 0
        self._wake = asyncio.Event()
        self._writer = loop.create_task(self._write_loop(tree), name="metadata-store-writer")
        self._open = True

    async def close(self) -> None:
        if not self._open:
            return
        self._open = False
        for registry in (self._data_watches, self._children_watches):
            for watches in list(registry.values()):
                for watch in list(watches):
                    watch.cancel()
        try:
            if self._failure is None and self._durable_seq < self._applied_seq:
                await self._until_durable(self._applied_seq)
        finally:
            if self._writer is not None:
                self._writer.cancel()
                await asyncio.wait([self._writer])
                self._writer = None
            self._undelivered.clear()
            self._tree = None
            self._file.release()

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = False
    ) -> str:
        check_path(path)
        return await self._mutate(
            lambda edit: edit.create(path, data, ephemeral=ephemeral, make_parents=make_parents)
        )

    async def get(self, path: str) -> tuple[bytes, Stat]:
        tree = self._live_tree()
        node = tree.nodes.get(check_path(path))
        if node is None:
            raise NoNodeError(path)
        return node.data, tree.stat(path)

    async def exists(self, path: str) -> Stat | None:
        tree = self._live_tree()
        return tree.stat(path) if check_path(path) in tree.nodes else None

    async def get_children(self, path: str) -> list[str]:
        children = self._live_tree().children.get(check_path(path))
        if children is None:
            raise NoNodeError(path)
        return sorted(children)

    async def set(self, path: str, data: bytes, *, expected_version: int = -1) -> Stat:
        check_path(path)
        return await self._mutate(lambda edit: edit.set(path, data, expected_version))

    async def delete(
        self, path: str, *, expected_version: int = -1, recursive: bool = False
    ) -> None:
        check_path(path)
        await self._mutate(lambda edit: edit.delete(path, expected_version, recursive=recursive))

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        def apply_all(edit: _Edit) -> list[OpResult]:
            results: list[OpResult] = []
            for index, op in enumerate(ops):
                edit.op_index = index
                results.append(edit.apply(op))
            return results

        return await self._mutate(apply_all)

    async def watch_data(self, path: str, callback: WatchCallback) -> WatchHandle:
        self._live_tree()
        return _LocalWatch(self._data_watches, check_path(path), callback)

    async def watch_children(self, path: str, callback: WatchCallback) -> WatchHandle:
        self._live_tree()
        return _LocalWatch(self._children_watches, check_path(path), callback)

    def _live_tree(self) -> _Tree:
        if self._failure is not None:
            raise MetadataStoreError(
                f"metadata store {self._file.path} failed: {self._failure}"
            ) from self._failure
        if not self._open or self._tree is None:
            raise MetadataStoreError("metadata store is not started")
        return self._tree

    async def _mutate(self, change: Callable[[_Edit], _T]) -> _T:
        edit = _Edit(self._live_tree(), self._session_id, now_ms())
        try:
            result = change(edit)
        except BaseException:
            edit.rollback()
            raise
        if edit.persistent:
            self._applied_seq += 1
            self._wake.set()
        self._enqueue(edit.events)
        if edit.persistent:
            await self._until_durable(self._applied_seq)
        return result

    def _enqueue(self, events: list[WatchEvent]) -> None:
        # Tagged with the latest mutation number so that events stay in mutation order even
        # when an ephemeral-only change (no write of its own) follows a pending write.
        seq = self._applied_seq
        for event in events:
            if event.type is not EventType.CHILDREN_CHANGED:
                for watch in self._data_watches.get(event.path, ()):
                    self._undelivered.append((seq, watch, event))
            if event.type is not EventType.CHANGED:
                for watch in self._children_watches.get(event.path, ()):
                    self._undelivered.append((seq, watch, event))
        self._settle()

    async def _until_durable(self, seq: int) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, waiter))
        await waiter

    async def _write_loop(self, tree: _Tree) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            seq = self._applied_seq
            try:
                await loop.run_in_executor(None, self._file.write, dict(tree.nodes))
            except Exception as exc:
                self._fail(exc)
                return
            self._durable_seq = seq
            self._settle()

    def _settle(self) -> None:
        """Answer the waiters and deliver the events that the file now covers."""
        while self._waiters and self._waiters[0][0] <= self._durable_seq:
            waiter = self._waiters.popleft()[1]
            if not waiter.done():
                waiter.set_result(None)
        loop = asyncio.get_running_loop()
        while self._undelivered and self._undelivered[0][0] <= self._durable_seq:
            _, watch, event = self._undelivered.popleft()
            loop.call_soon(watch.deliver, event)

    def _fail(self, exc: Exception) -> None:
        logger.error("metadata store write to %s failed", self._file.path, exc_info=exc)
        self._failure = exc
        for _, waiter in self._waiters:
            if not waiter.done():
                error = MetadataStoreError(f"cannot write {self._file.path}: {exc}")
                error.__cause__ = exc
                waiter.set_exception(error)
        self._waiters.clear()
        self._undelivered.clear()
