"""One re-arming read of a ZkWatch: the kazoo requests that read a node and leave a
one-shot watch on it.

The read settles its future in the loop callback that receives ZooKeeper's reply (posted
by the connection thread, zk_client.post_call), not one loop turn later through a chain
of futures: ZkWatch relies on a reply's future settling in ZooKeeper's order among the
replies and events (see its docstring).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from kazoo import exceptions as kz

from tiercel.server.metadata.zk_client import post_call
from tiercel.server.metadata.zk_watch import NodeState, NodeVersion, WatchKind, ZkWatch

__all__ = ["WatchRead"]


class WatchRead:
    """A data watch reads with exists (which also watches a missing node for its
    creation); a children watch with getChildren, and with exists while the node is
    missing (ZooKeeper's DataTree.getChildren throws NoNodeException before it adds a
    child watch). Event-loop only, but for kazoo's
    completion callbacks, which only post to the loop."""

    __slots__ = ("_client", "_found", "_loop", "_path", "_watch")

    def __init__(self, client: Any, zk_path: str, watch: ZkWatch) -> None:
        self._client = client
        self._path = zk_path
        self._watch = watch
        self._loop = asyncio.get_running_loop()
        self._found: asyncio.Future[NodeState] = self._loop.create_future()

    def send(self) -> asyncio.Future[NodeState]:
        """Send the first request now; the future settles with the node's state."""
        if self._watch.kind is WatchKind.DATA:
            self._stat()
        else:
            self._children()
        return self._found

    def _send(self, issue: Callable[[], Any], on_reply: Callable[[Any], None]) -> None:
        try:
            issue().rawlink(partial(post_call, self._loop, on_reply))
        except Exception as e:  # kazoo refused it (stopped client): the watch retries
            self._found.set_exception(e)

    def _stat(self) -> None:
        self._send(
            lambda: self._client.exists_async(self._path, self._watch.on_zk_event), self._on_stat
        )

    def _children(self) -> None:
        self._send(
            lambda: self._client.get_children_async(
                self._path, self._watch.on_zk_event, include_data=True
            ),
            self._on_children,
        )

    def _on_stat(self, result: Any) -> None:
        if self._found.done():  # the watch was cancelled
            return
        if result.exception is not None:
            self._found.set_exception(result.exception)
        elif result.value is None:
            self._found.set_result(None)
        elif self._watch.kind is WatchKind.DATA:
            self._found.set_result(NodeVersion(result.value.czxid, result.value.version))
        else:  # created since getChildren found it missing: list it again
            self._children()

    def _on_children(self, result: Any) -> None:
        if self._found.done():
            return
        if isinstance(result.exception, kz.NoNodeError):
            self._stat()
        elif result.exception is not None:
            self._found.set_exception(result.exception)
        else:
            zstat = result.value[1]
            self._found.set_result(NodeVersion(zstat.czxid, zstat.cversion))
