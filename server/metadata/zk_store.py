"""ZooKeeperMetadataStore: the MetadataStore on a ZooKeeper ensemble, through kazoo.

Threads: see zk_client. Requests are issued from the loop with kazoo's `*_async` calls,
which append to a queue and write one byte to a socketpair; at most `_MAX_IN_FLIGHT` are
outstanding, fewer than that socketpair holds, so issuing never blocks. Starting and
stopping the client (thread start, join) run in the default executor.

Connection loss. kazoo fails the requests in flight (ConnectionLoss) and reconnects on its
own (backoff capped at `_RECONNECT_MAX_DELAY_S`). A call waits for the connection and tries
again, up to `connection_timeout_ms` in all, then raises MetadataStoreError. A mutation
whose first try was cut off may have been applied: when its retry then fails the way the
applied first try would make it fail, the store reads the node and reports success if the
node is as that mutation left it (create: our data, version 0, our ephemeral owner; set:
expected version + 1 and our data; delete: gone); a multi in that position raises
MetadataStoreError (outcome unknown), as a timed-out call does. Callers re-read on it.

Session expiry. kazoo opens a new session; the old one's ephemeral nodes are gone. The
store awaits its session listeners (the broker re-registers, the controller resigns), then
re-reads every watch, which reports what changed meanwhile (see zk_watch).

Chroot. A connect string may end in a chroot (`host:port,host:port/tiercel`); the store
prefixes it to every path itself, and creates it when missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final, TypeVar, assert_never

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.retry import KazooRetry

from tiercel.config.logging_setup import log_event
from tiercel.server.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    MetadataStore,
    MetadataStoreError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    OpResult,
    SessionListener,
    SetOp,
    Stat,
    WatchCallback,
    WatchHandle,
    check_path,
)
from tiercel.server.metadata.zk_client import (
    RETRIABLE,
    Attempts,
    InlineHandler,
    create_async,
    loop_time,
    post_result,
    stop_client,
    to_stat,
    translate,
)
from tiercel.server.metadata.zk_watch import NodeState, WatchKind, ZkWatch
from tiercel.server.metadata.zk_watch_read import WatchRead

__all__ = ["ZooKeeperMetadataStore", "parse_connect_string"]

_log: Final = logging.getLogger("tiercel.metadata")
_T = TypeVar("_T")
# Below the ~270 one-byte writes a Linux socketpair takes before a write blocks.
_MAX_IN_FLIGHT: Final = 128
_RECONNECT_MAX_DELAY_S: Final = 1.0
# A recursive delete retries when children appear or vanish under it meanwhile.
_RECURSIVE_DELETE_TRIES: Final = 5


def parse_connect_string(connect: str) -> tuple[str, str]:
    """Split `host:port[,host:port...][/chroot]` into hosts and chroot ('' for none)."""
    hosts, slash, chroot = connect.partition("/")
    if not hosts.strip():
        raise ValueError(f"no ZooKeeper host in {connect!r}")
    if not slash or not chroot:
        return hosts, ""
    return hosts, check_path("/" + chroot.rstrip("/"))


class ZooKeeperMetadataStore(MetadataStore):
    """The MetadataStore on ZooKeeper (see the module docstring).

    Invariants: between `start()` and `close()` `_client` is a started kazoo client and
    `_session_id` the id of its latest session; `_connected` is set while the loop's view
    of the connection is up; every registered watch is in `_watches`. Event-loop only;
    kazoo's connection thread only posts to the loop.
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 6000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self._hosts, self._root = parse_connect_string(connect)
        self._connect = connect
        self._session_timeout_s = session_timeout_ms / 1000
        self._request_timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000
        self._client: Any = None
        self._open = False
        self._session_id = 0
        self._connected = asyncio.Event()
        self._in_flight = asyncio.Semaphore(_MAX_IN_FLIGHT)
        self._watches: dict[ZkWatch, None] = {}
        self._session_listeners: list[SessionListener] = []
        self._reconnects: asyncio.Task[None] | None = None
        self._rearm_pending = False
        self._renewal_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- session ----------------------------------------------------------------------

    @property
    def session_id(self) -> int:
        self._check_open()
        return self._session_id

    def add_session_listener(self, listener: SessionListener) -> None:
        self._session_listeners.append(listener)

    async def start(self) -> None:
        if self._client is not None:
            raise MetadataStoreError("metadata store is already started")
        loop = self._loop = asyncio.get_running_loop()
        self._connected = asyncio.Event()
        self._session_id = 0
        retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=_RECONNECT_MAX_DELAY_S)
        client = KazooClient(
            hosts=self._hosts,
            timeout=self._session_timeout_s,
            handler=InlineHandler(),
            connection_retry=retry,
        )
        client.add_listener(partial(self._on_kazoo_state, client))
        self._client = client
        try:
            await loop.run_in_executor(None, client.start_async)
            await self._until_connected(time.monotonic() + self._request_timeout_s)
            await self._ensure_root()
        except BaseException:
            await self.close()
            raise
        self._open = True
        log_event(
            _log,
            logging.INFO,
            "zk_session_started",
            connect=self._connect,
            session_id=hex(self._session_id),
        )

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        self._open = False
        for watch in list(self._watches):
            watch.cancel()
        self._watches.clear()
        if self._reconnects is not None:
            self._reconnects.cancel()
            await asyncio.gather(self._reconnects, return_exceptions=True)
            self._reconnects = None
        # Wakes the calls waiting for a connection: they find the store closed.
        self._connected.set()
        # Ends the session (ZooKeeper deletes its ephemeral nodes) and joins kazoo's thread.
        await asyncio.get_running_loop().run_in_executor(None, stop_client, client)

    def _on_kazoo_state(self, client: Any, state: str) -> None:
        """kazoo's state listener (connection thread): post the change to the loop."""
        session = client.client_id
        session_id = session[0] if state == KazooState.CONNECTED and session else 0
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(self._state_changed, client, state, session_id)

    def _state_changed(self, client: Any, state: str, session_id: int) -> None:
        if client is not self._client:
            return
        if state != KazooState.CONNECTED:
            self._connected.clear()
            event = "zk_disconnected" if state == KazooState.SUSPENDED else "zk_session_lost"
            log_event(_log, logging.WARNING, event, session_id=hex(self._session_id))
            return
        renewed = self._session_id not in (0, session_id)
        self._session_id = session_id
        self._connected.set()
        if not self._open:
            return
        log_event(
            _log, logging.INFO, "zk_reconnected", session_id=hex(session_id), new_session=renewed
        )
        self._rearm_pending = True
        self._renewal_pending |= renewed
        if self._reconnects is None:
            self._reconnects = asyncio.get_running_loop().create_task(
                self._after_reconnect(), name="zk-reconnect"
            )

    async def _after_reconnect(self) -> None:
        """Tell the session listeners of a new session, then re-read every watch."""
        try:
            while self._rearm_pending:
                self._rearm_pending = False
                if self._renewal_pending:
                    self._renewal_pending = False
                    for listener in list(self._session_listeners):
                        try:
                            await listener()
                        except Exception as e:
                            log_event(
                                _log, logging.ERROR, "session_listener_failed", reason=repr(e)
                            )
                for watch in list(self._watches):
                    watch.trigger(None)
        finally:
            self._reconnects = None

    async def until_connected(self) -> None:
        await self._until_connected(None)

    async def _until_connected(self, deadline: float | None) -> None:
        while True:
            client = self._live_client()
            if self._connected.is_set() and client.connected:
                return
            if not client.connected:
                # kazoo knows first; the state change is on its way to the loop.
                self._connected.clear()
            try:
                async with asyncio.timeout_at(loop_time(deadline)):
                    await self._connected.wait()
            except TimeoutError:
                raise MetadataStoreError(
                    f"not connected to ZooKeeper {self._hosts} within {self._request_timeout_s:g}s"
                ) from None

    async def _ensure_root(self) -> None:
        path = ""
        for name in self._root.split("/")[1:]:
            path += "/" + name
            with contextlib.suppress(kz.NodeExistsError):
                await self._request(partial(create_async, path, b"", False), None)

    def _check_open(self) -> None:
        if not self._open:
            raise MetadataStoreError("metadata store is not started")

    def _live_client(self) -> Any:
        """The kazoo client, from start() (before the store is open) until close()."""
        if self._client is None:
            raise MetadataStoreError("metadata store is not started")
        return self._client

    # --- requests ---------------------------------------------------------------------

    def _zk(self, path: str) -> str:
        return self._root + path if path != "/" else self._root or "/"

    def _unroot(self, zk_path: str) -> str:
        return zk_path[len(self._root) :] or "/"

    async def _once(self, issue: Callable[[Any], Any], deadline: float) -> Any:
        """Send one request (`issue(client)` returns kazoo's async result) and await it."""
        client = self._live_client()
        loop = asyncio.get_running_loop()
        async with asyncio.timeout_at(loop_time(deadline)):
            await self._in_flight.acquire()
            try:
                future: asyncio.Future[Any] = loop.create_future()
                issue(client).rawlink(partial(post_result, loop, future))
                return await future
            finally:
                self._in_flight.release()

    async def _request(
        self, issue: Callable[[Any], Any], path: str | None, attempts: Attempts | None = None
    ) -> Any:
        """One request, tried again after connection loss until the call's time is up.

        ZooKeeper's errors are raised as kazoo's; a time-out as MetadataStoreError.
        """
        deadline = time.monotonic() + self._request_timeout_s
        while True:
            await self._until_connected(deadline)
            try:
                return await self._once(issue, deadline)
            except kz.ConnectionClosedError:
                raise MetadataStoreError("metadata store is closed", path=path) from None
            except RETRIABLE:
                if attempts is not None:
                    attempts.uncertain = True
            except TimeoutError:
                raise MetadataStoreError(
                    f"ZooKeeper did not answer within {self._request_timeout_s:g}s", path=path
                ) from None

    async def _call(
        self, issue: Callable[[Any], Any], path: str, attempts: Attempts | None = None
    ) -> Any:
        """`_request` with ZooKeeper's errors raised as the store's."""
        try:
            return await self._request(issue, path, attempts)
        except kz.ZookeeperError as e:
            raise translate(e, path) from None

    # --- reads ------------------------------------------------------------------------

    async def get(self, path: str) -> tuple[bytes, Stat]:
        self._check_open()
        zk_path = self._zk(check_path(path))
        data, zstat = await self._call(lambda c: c.get_async(zk_path), path)
        return bytes(data), to_stat(zstat)

    async def exists(self, path: str) -> Stat | None:
        self._check_open()
        zk_path = self._zk(check_path(path))
        zstat = await self._call(lambda c: c.exists_async(zk_path), path)
        return None if zstat is None else to_stat(zstat)

    async def get_children(self, path: str) -> list[str]:
        self._check_open()
        zk_path = self._zk(check_path(path))
        return sorted(await self._call(lambda c: c.get_children_async(zk_path), path))

    # --- mutations --------------------------------------------------------------------

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = False
    ) -> str:
        self._check_open()
        check_path(path)
        try:
            return await self._create(path, bytes(data), ephemeral)
        except NoNodeError:
            parent = path.rsplit("/", 1)[0] or "/"
            if not make_parents or parent == "/":
                raise
        with contextlib.suppress(NodeExistsError):
            await self.create(parent, make_parents=True)
        return await self._create(path, bytes(data), ephemeral)

    async def _create(self, path: str, data: bytes, ephemeral: bool) -> str:
        attempts = Attempts()
        try:
            await self._call(partial(create_async, self._zk(path), data, ephemeral), path, attempts)
        except NodeExistsError:
            if not attempts.uncertain or not await self._created_by_us(path, data, ephemeral):
                raise
        return path

    async def _created_by_us(self, path: str, data: bytes, ephemeral: bool) -> bool:
        try:
            found, stat = await self.get(path)
        except NoNodeError:
            return False
        owner = self._session_id if ephemeral else 0
        return found == data and stat.version == 0 and stat.ephemeral_owner == owner

    async def set(self, path: str, data: bytes, *, expected_version: int = -1) -> Stat:
        self._check_open()
        zk_path = self._zk(check_path(path))
        attempts = Attempts()
        try:
            zstat = await self._call(
                lambda c: c.set_async(zk_path, bytes(data), expected_version), path, attempts
            )
        except BadVersionError:
            if attempts.uncertain:
                found, stat = await self.get(path)
                if found == data and stat.version == expected_version + 1:
                    return stat
            raise
        return to_stat(zstat)

    async def delete(
        self, path: str, *, expected_version: int = -1, recursive: bool = False
    ) -> None:
        self._check_open()
        if check_path(path) == "/":
            raise ValueError("the root node cannot be deleted")
        if recursive:
            await self._delete_recursive(path, expected_version)
            return
        zk_path = self._zk(path)
        attempts = Attempts()
        try:
            await self._call(lambda c: c.delete_async(zk_path, expected_version), path, attempts)
        except NoNodeError:
            if not attempts.uncertain:
                raise

    async def _delete_recursive(self, path: str, expected_version: int) -> None:
        """Delete the subtree in one transaction, deepest first, checking the top's version
        last; list it again when it changed under us (a child created or deleted)."""
        for _ in range(_RECURSIVE_DELETE_TRIES):
            subtree = await self._subtree(path)
            ops: list[Op] = [DeleteOp(p) for p in reversed(subtree[1:])]
            ops.append(DeleteOp(path, expected_version))
            try:
                await self.multi(ops)
                return
            except (NoNodeError, NotEmptyError, BadVersionError) as e:
                if e.op_index == len(ops) - 1 and not isinstance(e, NotEmptyError):
                    raise type(e)(path) from None
        raise MetadataStoreError(f"the subtree of {path} kept changing", path=path)

    async def _subtree(self, path: str) -> list[str]:
        """`path` and its descendants, parents before children."""
        nodes = [path]
        index = 0
        while index < len(nodes):
            parent = nodes[index]
            index += 1
            try:
                children = await self.get_children(parent)
            except NoNodeError:
                if parent == path:
                    raise
                continue
            nodes.extend(f"{parent}/{name}" for name in children)
        return nodes

    async def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        self._check_open()
        if not ops:
            return []
        attempts = Attempts()
        try:
            results = await self._request(partial(self._transaction, ops), None, attempts)
        except kz.ZookeeperError as e:
            raise translate(e, None) from None
        failed = next(
            (
                (index, r)
                for index, r in enumerate(results)
                if isinstance(r, Exception)
                and not isinstance(r, kz.RolledBackError | kz.RuntimeInconsistency)
            ),
            None,
        )
        if failed is None:
            return [self._op_result(op, r) for op, r in zip(ops, results, strict=True)]
        index, error = failed
        if attempts.uncertain:
            raise MetadataStoreError(
                f"connection lost during a multi, which may have been applied: {error!r}",
                op_index=index,
            )
        raise translate(error, ops[index].path, index)

    def _transaction(self, ops: Sequence[Op], client: Any) -> Any:
        transaction = client.transaction()
        for op in ops:
            path = self._zk(op.path)
            match op:
                case CreateOp():
                    transaction.create(path, bytes(op.data), ephemeral=op.ephemeral)
                case SetOp():
                    transaction.set_data(path, bytes(op.data), op.expected_version)
                case DeleteOp():
                    if op.path == "/":
                        raise ValueError("the root node cannot be deleted")
                    transaction.delete(path, op.expected_version)
                case CheckOp():
                    transaction.check(path, op.expected_version)
                case _:
                    assert_never(op)
        return transaction.commit_async()

    def _op_result(self, op: Op, result: Any) -> OpResult:
        if isinstance(op, CreateOp):
            return self._unroot(str(result))
        if isinstance(op, SetOp):
            return to_stat(result)
        return None

    # --- watches ----------------------------------------------------------------------

    async def watch_data(self, path: str, callback: WatchCallback) -> WatchHandle:
        return await self._watch(path, WatchKind.DATA, callback)

    async def watch_children(self, path: str, callback: WatchCallback) -> WatchHandle:
        return await self._watch(path, WatchKind.CHILDREN, callback)

    async def _watch(self, path: str, kind: WatchKind, callback: WatchCallback) -> WatchHandle:
        self._check_open()
        watch = ZkWatch(asyncio.get_running_loop(), self, check_path(path), kind, callback)
        self._watches[watch] = None
        try:
            async with asyncio.timeout(self._request_timeout_s):
                await watch.armed
        except BaseException as e:
            self._forget(watch)
            if isinstance(e, TimeoutError):
                raise MetadataStoreError(f"cannot watch {path}: ZooKeeper unavailable") from None
            raise
        return _Handle(self, watch)

    def _forget(self, watch: ZkWatch) -> None:
        watch.cancel()
        self._watches.pop(watch, None)

    def arm(self, watch: ZkWatch) -> asyncio.Future[NodeState]:
        """Send the read that leaves a one-shot watch for `watch` (see zk_watch.WatchArmer).

        Sent at once, outside `_in_flight` (one read per watch at most), and settled in
        the loop callback that receives the reply (see zk_watch_read).
        """
        return WatchRead(self._live_client(), self._zk(watch.path), watch).send()


class _Handle:
    """The WatchHandle of a ZkWatch: cancelling also unregisters it from the store."""

    __slots__ = ("_store", "_watch")

    def __init__(self, store: ZooKeeperMetadataStore, watch: ZkWatch) -> None:
        self._store = store
        self._watch = watch

    def cancel(self) -> None:
        self._store._forget(self._watch)
