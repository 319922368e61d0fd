"""The Raft client's real message queue: a poll waits for a message, a wakeup or its
timeout, and never keeps the loop to itself, or a client polling with nothing to wait
for would starve the sockets that bring its messages."""

from __future__ import annotations

import asyncio
import time

from tiercel.server.raft.endpoints import Node
from tiercel.server.raft.raft_message import AsyncMessageQueue, InboundResponse


def response(correlation_id: int) -> InboundResponse:
    return InboundResponse(correlation_id, object(), Node(1, "localhost", 1))


async def test_a_poll_without_timeout_still_lets_the_loop_run() -> None:
    queue = AsyncMessageQueue()
    ran: list[bool] = []
    asyncio.get_running_loop().call_soon(ran.append, True)
    assert await queue.poll(0) is None
    assert ran == [True]
    queue.add(response(1))
    ran.clear()
    asyncio.get_running_loop().call_soon(ran.append, True)
    assert (await queue.poll(0)) is not None
    assert ran == [True]


async def test_a_poll_returns_on_a_message_or_a_wakeup_before_its_timeout() -> None:
    queue = AsyncMessageQueue()
    loop = asyncio.get_running_loop()
    loop.call_later(0.01, queue.add, response(7))
    started = time.monotonic()
    got = await queue.poll(10_000)
    assert got is not None and got.correlation_id == 7
    loop.call_later(0.01, queue.wakeup)
    assert await queue.poll(10_000) is None
    assert time.monotonic() - started < 5
    assert await queue.poll(1) is None and queue.is_empty
