"""NodeToControllerChannel against scripted controllers on local sockets: a request
follows the active controller after a NOT_CONTROLLER answer or a lost connection, waits
while none is known, and gives up after its retry timeout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from support.scripted_broker import ScriptedLeader
from tiercel.server.node_to_controller_channel import (
    ControllerInformation,
    ControllerRequestTimeoutError,
    NodeToControllerChannel,
)

HEARTBEAT = 63
BODY = {
    "broker_id": 4,
    "broker_epoch": 10,
    "current_metadata_offset": 5,
    "want_fence": False,
    "want_shut_down": False,
}


@pytest.fixture
async def controllers() -> AsyncIterator[list[ScriptedLeader]]:
    scripted = [ScriptedLeader({HEARTBEAT: (0, 1)}) for _ in range(2)]
    for controller in scripted:
        controller.server = await asyncio.start_server(controller.serve, "127.0.0.1", 0)
    yield scripted
    for controller in scripted:
        assert controller.server is not None
        controller.server.close()
        await controller.server.wait_closed()


def info(node_id: int, controller: ScriptedLeader) -> ControllerInformation:
    host, port = controller.endpoint
    return ControllerInformation(node_id, host, port)


async def test_a_request_follows_the_active_controller(
    controllers: list[ScriptedLeader],
) -> None:
    old, new = controllers
    old.answers[HEARTBEAT] = {"error_code": 41, "should_shut_down": False}  # NOT_CONTROLLER
    new.answers[HEARTBEAT] = {"error_code": 0, "is_fenced": False, "should_shut_down": False}
    active = [info(1, old)]
    channel = NodeToControllerChannel(lambda: active[0], "broker-4", 5.0, 0.02)

    async def move_after_first_refusal() -> None:
        while not old.requests or old.requests[-1][0] != HEARTBEAT:
            await asyncio.sleep(0.005)
        active[0] = info(2, new)

    mover = asyncio.create_task(move_after_first_refusal())
    response = await channel.send(HEARTBEAT, (0, 1), BODY, retry_timeout_s=10)
    await mover
    assert response.error_code == 0 and response.is_fenced is False
    [(_, version, request)] = [r for r in new.requests if r[0] == HEARTBEAT]
    assert version == 1 and request.broker_epoch == 10
    channel.close()


async def test_a_lost_connection_is_retried_and_no_controller_waits(
    controllers: list[ScriptedLeader],
) -> None:
    silent, answering = controllers  # silent hangs up: nothing scripted for heartbeats
    answering.answers[HEARTBEAT] = {"error_code": 0, "should_shut_down": True}
    known: list[ControllerInformation | None] = [None]
    channel = NodeToControllerChannel(lambda: known[0], "broker-4", 5.0, 0.02)
    sent = asyncio.create_task(channel.send(HEARTBEAT, (0, 1), BODY, retry_timeout_s=10))
    await asyncio.sleep(0.1)
    assert not sent.done()  # no controller known yet
    known[0] = info(1, silent)
    while silent.connections < 2:  # hung up on, and tried again
        await asyncio.sleep(0.005)
    known[0] = info(2, answering)
    response = await asyncio.wait_for(sent, 10)
    assert response.should_shut_down is True
    channel.close()


async def test_no_answer_within_the_retry_timeout() -> None:
    channel = NodeToControllerChannel(lambda: None, "broker-4", 5.0, 0.02)
    with pytest.raises(ControllerRequestTimeoutError, match="no active controller answered"):
        await channel.send(HEARTBEAT, (0, 1), BODY, retry_timeout_s=0.2)
