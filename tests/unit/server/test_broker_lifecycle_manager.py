"""BrokerLifecycleManager against a scripted controller channel: registration retried
until it succeeds, the STARTING → RECOVERY → RUNNING path on the heartbeat answers,
controlled shutdown, a failed log dir reported, and the registration timeout."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from tiercel.server.broker_lifecycle_manager import (
    BrokerLifecycleManager,
    BrokerState,
    LifecycleConfig,
    Registration,
)

CONFIG = LifecycleConfig(
    node_id=3,
    rack="r1",
    heartbeat_interval_ms=20,
    session_timeout_ms=200,
    initial_registration_timeout_ms=2000,
)
DIR_A, DIR_B = uuid.UUID(int=7), uuid.UUID(int=5)
REGISTRATION = Registration(
    cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
    listeners=[("PLAINTEXT", "127.0.0.1", 9092, 0)],
    features=[("metadata.version", 7, 25), ("group.version", 0, 1)],
    log_dir_ids=[DIR_A, DIR_B],
)


class ScriptedController:
    """Answers each request with ``answer(api_key, body)``; None means a failure to
    reach any controller."""

    def __init__(self, answer: Callable[[int, dict[str, Any]], Any]) -> None:
        self.answer = answer
        self.requests: list[tuple[int, dict[str, Any]]] = []
        self.closed = False

    async def send(
        self, api_key: int, versions: tuple[int, int], body: Any, retry_timeout_s: float
    ) -> Any:
        self.requests.append((api_key, body))
        await asyncio.sleep(0)
        response = self.answer(api_key, body)
        if response is None:
            raise TimeoutError("no controller")
        return response

    def close(self) -> None:
        self.closed = True

    def heartbeats(self) -> list[dict[str, Any]]:
        return [body for key, body in self.requests if key == 63]


def heartbeat(caught_up: bool, fenced: bool, shut_down: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        error_code=0, is_caught_up=caught_up, is_fenced=fenced, should_shut_down=shut_down
    )


async def wait_for(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.005)


async def test_registration_then_catch_up_unfence_and_controlled_shutdown() -> None:
    controller_state = {"registrations": 0, "caught_up": False, "shut_down": False}

    def answer(api_key: int, body: dict[str, Any]) -> Any:
        if api_key == 62:
            controller_state["registrations"] += 1
            if controller_state["registrations"] == 1:
                return SimpleNamespace(error_code=7, broker_epoch=-1)  # REQUEST_TIMED_OUT
            return SimpleNamespace(error_code=0, broker_epoch=42)
        return heartbeat(
            bool(controller_state["caught_up"]),
            fenced=body["want_fence"] or body["want_shut_down"],
            shut_down=bool(controller_state["shut_down"]),
        )

    channel = ScriptedController(answer)
    manager = BrokerLifecycleManager(CONFIG, channel)
    manager.start(lambda: 17, REGISTRATION)
    await wait_for(lambda: manager.broker_epoch == 42)
    registration = channel.requests[0][1]
    assert registration["incarnation_id"] == manager.incarnation_id
    assert registration["log_dirs"] == [DIR_B, DIR_A] and registration["rack"] == "r1"
    assert registration["features"][1] == {
        "name": "group.version",
        "min_supported_version": 0,
        "max_supported_version": 1,
    }
    # Not caught up yet: STARTING, fenced at its own request.
    await wait_for(lambda: len(channel.heartbeats()) >= 3)
    assert manager.state is BrokerState.STARTING and not manager.initial_catch_up.done()
    first = channel.heartbeats()[0]
    assert (first["broker_epoch"], first["current_metadata_offset"], first["want_fence"]) == (
        42,
        17,
        True,
    )
    controller_state["caught_up"] = True
    await asyncio.wait_for(manager.initial_catch_up, 10)
    assert manager.state is BrokerState.RECOVERY
    unfenced = manager.set_ready_to_unfence()
    await asyncio.wait_for(unfenced, 10)
    assert manager.state is BrokerState.RUNNING
    assert channel.heartbeats()[-1]["want_fence"] is False

    manager.propagate_directory_failure(DIR_A)
    await wait_for(lambda: channel.heartbeats()[-1]["offline_log_dirs"] == [DIR_A])

    done = manager.begin_controlled_shutdown()
    await wait_for(lambda: channel.heartbeats()[-1]["want_shut_down"])
    assert not done.done() and manager.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN
    controller_state["shut_down"] = True
    await asyncio.wait_for(done, 10)
    assert manager.state is BrokerState.SHUTTING_DOWN
    await manager.close()
    assert channel.closed


async def test_no_registration_within_the_timeout_fails_the_start() -> None:
    config = LifecycleConfig(3, None, 20, 200, initial_registration_timeout_ms=300)
    channel = ScriptedController(lambda api_key, body: None)
    manager = BrokerLifecycleManager(config, channel)
    manager.start(lambda: -1, REGISTRATION)
    with pytest.raises(TimeoutError, match="could not register"):
        await asyncio.wait_for(manager.initial_catch_up, 10)
    # Backing off, not spinning: about 100, 200, 200 ms apart.
    assert 2 <= len(channel.requests) <= 6
    await manager.close()


async def test_controlled_shutdown_before_start_has_nothing_to_wait_for() -> None:
    manager = BrokerLifecycleManager(CONFIG, ScriptedController(lambda k, b: None))
    await asyncio.wait_for(manager.begin_controlled_shutdown(), 1)
    await manager.close()
