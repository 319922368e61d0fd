"""ZkWatch delivers the events of several watches in the order ZooKeeper sent them.

No ZooKeeper here: a fake WatchArmer answers each re-arming read when the test says, and
the test posts replies and events to the loop in one batch, as the connection thread does
(zk_client: one `call_soon_threadsafe` per reply or event, in the order it read them).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from tiercel.server.metadata.store import EventType, WatchEvent
from tiercel.server.metadata.zk_watch import NodeState, NodeVersion, WatchKind, ZkWatch


class FakeArmer:
    """Each `arm` is answered when the test says, with `answer`."""

    def __init__(self) -> None:
        self.reads: dict[str, list[asyncio.Future[NodeState]]] = {}

    def arm(self, watch: ZkWatch) -> asyncio.Future[NodeState]:
        future: asyncio.Future[NodeState] = asyncio.get_running_loop().create_future()
        self.reads.setdefault(watch.path, []).append(future)
        return future

    async def until_connected(self) -> None:
        return None

    def answer(self, path: str, state: NodeState) -> None:
        pending = [f for f in self.reads[path] if not f.done()]
        assert len(pending) == 1
        pending[0].set_result(state)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _event(zk_type: str) -> SimpleNamespace:
    return SimpleNamespace(type=zk_type)


async def test_an_event_behind_a_read_reply_keeps_its_place_among_other_watches() -> None:
    loop = asyncio.get_running_loop()
    armer = FakeArmer()
    seen: list[tuple[str, EventType]] = []

    def record(event: WatchEvent) -> None:
        seen.append((event.path, event.type))

    node = ZkWatch(loop, armer, "/a", WatchKind.DATA, record)
    parent = ZkWatch(loop, armer, "/", WatchKind.CHILDREN, record)
    await _settle()
    armer.answer("/a", None)
    armer.answer("/", NodeVersion(1, 0))
    await asyncio.gather(node.armed, parent.armed)
    # A child of / is created: / is told and re-arms; its read is not answered yet.
    parent.on_zk_event(_event("CHILD"))
    await _settle()
    assert seen == [("/", EventType.CHILDREN_CHANGED)]
    # ZooKeeper then answers the read (nothing more changed) and creates /a, firing the
    # watch of /a and then the new child watch of / (DataTree.createNode's order). The
    # connection thread posts the three in that order, in one batch.
    reply = armer.reads["/"][-1]
    loop.call_soon_threadsafe(reply.set_result, NodeVersion(1, 1))
    node.on_zk_event(_event("CREATED"))
    parent.on_zk_event(_event("CHILD"))
    await _settle()
    armer.answer("/a", NodeVersion(7, 0))
    armer.answer("/", NodeVersion(1, 2))
    await _settle()
    assert seen == [
        ("/", EventType.CHILDREN_CHANGED),
        ("/a", EventType.CREATED),
        ("/", EventType.CHILDREN_CHANGED),
    ]
    node.cancel()
    parent.cancel()
