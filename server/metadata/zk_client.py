"""The bridge between kazoo's connection thread and the event loop.

kazoo runs one connection thread (socket I/O, pings, reconnects). `InlineHandler` runs
kazoo's callbacks (request completions, watch events) inline on that thread instead of on
kazoo's worker threads, and every callback of ours only posts to the event loop with
`call_soon_threadsafe` (`post_result`). So the loop sees replies and events in the order
the connection read them, which is ZooKeeper's order: a change's watch event before the
reply to the request that made it. The pings come from that thread too, so a busy event
loop does not stop them: only a stopped process (or one that holds the GIL without
releasing it) misses its session timeout. Also here: kazoo's errors as the
MetadataStore's (`translate`) and kazoo's ZnodeStat as a `Stat`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Final

from kazoo import exceptions as kz
from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler

from tiercel.config.logging_setup import log_event
from tiercel.server.metadata.store import (
    BadVersionError,
    MetadataStoreError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Stat,
)

__all__ = [
    "RETRIABLE",
    "Attempts",
    "InlineHandler",
    "create_async",
    "loop_time",
    "post_call",
    "post_result",
    "stop_client",
    "to_stat",
    "translate",
]

_log: Final = logging.getLogger("tiercel.metadata")
_ERRORS: Final[dict[type[Exception], type[MetadataStoreError]]] = {
    kz.NoNodeError: NoNodeError,
    kz.NodeExistsError: NodeExistsError,
    kz.BadVersionError: BadVersionError,
    kz.NotEmptyError: NotEmptyError,
    kz.NoChildrenForEphemeralsError: NoChildrenForEphemeralsError,
}
# The request never reached a server, or its reply was lost: worth another try.
RETRIABLE: Final = (kz.ConnectionLoss, kz.SessionExpiredError)


class _InlineResult(AsyncResult):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's AsyncResult, running its callbacks on the thread that completes it."""

    def _do_callbacks(self) -> None:
        for callback in self._callbacks:
            callback(self)


class InlineHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler with watch events and completions run inline (see module
    docstring): our callbacks only post to the event loop, so they never block kazoo."""

    def dispatch_callback(self, callback: Any) -> None:
        callback.func(*callback.args)

    def async_result(self) -> _InlineResult:
        return _InlineResult(self)


class Attempts:
    """Whether an earlier try of a request may have reached ZooKeeper."""

    __slots__ = ("uncertain",)

    def __init__(self) -> None:
        self.uncertain = False


def to_stat(zstat: Any) -> Stat:
    return Stat(
        version=zstat.version,
        ctime=zstat.ctime,
        mtime=zstat.mtime,
        ephemeral_owner=zstat.ephemeralOwner,
        num_children=zstat.numChildren,
        czxid=zstat.czxid,
    )


def translate(error: Exception, path: str | None, op_index: int | None = None) -> Exception:
    kind = _ERRORS.get(type(error))
    if kind is not None and path is not None:
        return kind(path, op_index=op_index)
    return MetadataStoreError(
        f"ZooKeeper error {type(error).__name__}", path=path, op_index=op_index
    )


def create_async(path: str, data: bytes, ephemeral: bool, client: Any) -> Any:
    return client.create_async(path, data, ephemeral=ephemeral)


def post_result(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], result: Any) -> None:
    """kazoo's completion callback (connection thread): settle `future` on the loop."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
        loop.call_soon_threadsafe(_settle, future, result)


def post_call(loop: asyncio.AbstractEventLoop, call: Any, result: Any) -> None:
    """kazoo's completion callback (connection thread): run `call(result)` on the loop, in
    the order the connection read the replies and events."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
        loop.call_soon_threadsafe(call, result)


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if future.done():
        return
    if result.exception is not None:
        future.set_exception(result.exception)
    else:
        future.set_result(result.value)


def loop_time(deadline: float | None) -> float | None:
    """A time.monotonic() deadline on the running loop's clock."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + deadline - time.monotonic()


def stop_client(client: Any) -> None:
    """Blocking: end the session and stop kazoo's threads. Run in an executor."""
    try:
        client.stop()
        client.close()
    except Exception as e:
        log_event(_log, logging.WARNING, "zk_close_failed", reason=repr(e))
