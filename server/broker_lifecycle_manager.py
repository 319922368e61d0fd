"""A KRaft broker's registration and heartbeats with the active controller (Kafka's
BrokerLifecycleManager).

States, as Kafka's BrokerState: STARTING (registered or registering, catching up with
the metadata log), RECOVERY (caught up, fenced until the broker says it is ready),
RUNNING (unfenced), PENDING_CONTROLLED_SHUTDOWN (heartbeats ask to shut down; the
controller moves leaderships away and answers should_shut_down), SHUTTING_DOWN. One
request is in flight at a time: a registration until it succeeds, then a heartbeat
every ``broker.heartbeat.interval.ms`` (10 ms apart while STARTING, 50 ms after the
first controlled-shutdown answer, as Kafka), with exponential backoff after failures.
The controller fences a broker whose heartbeats stop for ``broker.session.timeout.ms``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import UnsupportedVersionError

__all__ = ["BrokerLifecycleManager", "BrokerState", "ControllerChannel", "LifecycleConfig"]

_log: Final = logging.getLogger("tiercel.broker.lifecycle")

_BROKER_REGISTRATION: Final = 62
_BROKER_HEARTBEAT: Final = 63
_REGISTRATION_VERSIONS: Final = (0, 4)
_HEARTBEAT_VERSIONS: Final = (0, 1)
_STARTING_HEARTBEAT_S: Final = 0.010
_FIRST_SHUTDOWN_HEARTBEAT_S: Final = 0.050


class BrokerState(enum.IntEnum):
    """Kafka's BrokerState, with its wire values (DescribeCluster, metrics)."""

    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


class ControllerChannel(Protocol):
    """What the lifecycle manager needs of a `NodeToControllerChannel`."""

    async def send(
        self, api_key: int, versions: tuple[int, int], body: Any, retry_timeout_s: float
    ) -> Any: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class LifecycleConfig:
    node_id: int
    rack: str | None
    heartbeat_interval_ms: int  # broker.heartbeat.interval.ms
    session_timeout_ms: int  # broker.session.timeout.ms
    initial_registration_timeout_ms: int  # initial.broker.registration.timeout.ms


@dataclass(frozen=True)
class Registration:
    """What the broker registers: the listeners it advertises (name, host, port,
    security protocol id), the features it supports (name, min, max), its log dirs."""

    cluster_id: str
    listeners: Sequence[tuple[str, str, int, int]]
    features: Sequence[tuple[str, int, int]]
    log_dir_ids: Sequence[uuid.UUID]


class BrokerLifecycleManager:
    """Event-loop only. Invariant: ``broker_epoch`` is -1 until a registration
    succeeded; heartbeats are sent only with it."""

    def __init__(self, config: LifecycleConfig, channel: ControllerChannel) -> None:
        self._config = config
        self._channel = channel
        self.incarnation_id = uuid.uuid4()
        self.state = BrokerState.NOT_RUNNING
        self.broker_epoch = -1
        loop = asyncio.get_running_loop()
        self.initial_catch_up: asyncio.Future[None] = loop.create_future()
        self.initial_unfence: asyncio.Future[None] = loop.create_future()
        self.controlled_shutdown: asyncio.Future[None] = loop.create_future()
        self._ready_to_unfence = False
        self._offline_dirs: set[uuid.UUID] = set()
        self._got_shutdown_answer = False
        self._failed_attempts = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._registration: Registration | None = None
        self._metadata_offset: Callable[[], int] = lambda: -1

    def start(self, highest_metadata_offset: Callable[[], int], registration: Registration) -> None:
        """Register, then heartbeat. ``initial_catch_up`` fails with TimeoutError if no
        registration succeeds within initial.broker.registration.timeout.ms."""
        self._metadata_offset = highest_metadata_offset
        self._registration = registration
        self.state = BrokerState.STARTING
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-lifecycle")
        log_event(
            _log,
            logging.INFO,
            "broker_lifecycle_starting",
            node_id=self._config.node_id,
            incarnation_id=str(self.incarnation_id),
            cluster_id=registration.cluster_id,
        )

    def set_ready_to_unfence(self) -> asyncio.Future[None]:
        """The broker has applied the metadata it caught up to: heartbeats stop asking to
        stay fenced. The returned future completes once the controller unfenced it."""
        self._ready_to_unfence = True
        self._wake.set()
        return self.initial_unfence

    def propagate_directory_failure(self, directory_id: uuid.UUID) -> None:
        """Report a failed log dir in the next heartbeat, sent at once."""
        self._offline_dirs.add(directory_id)
        self._wake.set()

    def begin_controlled_shutdown(self) -> asyncio.Future[None]:
        """Ask the controller to move this broker's leaderships away; the returned
        future completes when it answers should_shut_down (or when the broker was not
        running, so there is nothing to move)."""
        if self.state in (BrokerState.STARTING, BrokerState.RECOVERY, BrokerState.RUNNING):
            self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
            self._wake.set()
        elif not self.controlled_shutdown.done():
            self.controlled_shutdown.set_result(None)
        return self.controlled_shutdown

    async def close(self) -> None:
        self.state = BrokerState.SHUTTING_DOWN
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._channel.close()
        for future in (self.initial_catch_up, self.initial_unfence, self.controlled_shutdown):
            if not future.done():
                future.cancel()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        registration_deadline = loop.time() + self._config.initial_registration_timeout_ms / 1000
        while self.state is not BrokerState.SHUTTING_DOWN:
            if self.broker_epoch < 0:
                delay = await self._register()
                if self.broker_epoch < 0 and loop.time() >= registration_deadline:
                    self._fail_start(
                        TimeoutError(
                            f"broker {self._config.node_id} could not register with the "
                            f"active controller within initial.broker.registration.timeout.ms"
                        )
                    )
            else:
                delay = await self._heartbeat()
            self._wake.clear()
            if delay > 0:
                try:
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                except TimeoutError:
                    pass

    def _fail_start(self, error: BaseException) -> None:
        if not self.initial_catch_up.done():
            self.initial_catch_up.set_exception(error)

    async def _register(self) -> float:
        registration = self._registration
        assert registration is not None
        body = {
            "broker_id": self._config.node_id,
            "cluster_id": registration.cluster_id,
            "incarnation_id": self.incarnation_id,
            "listeners": [
                {"name": n, "host": h, "port": p, "security_protocol": s}
                for n, h, p, s in registration.listeners
            ],
            "features": [
                {"name": n, "min_supported_version": lo, "max_supported_version": hi}
                for n, lo, hi in registration.features
            ],
            "rack": self._config.rack,
            "log_dirs": sorted(registration.log_dir_ids),
            "previous_broker_epoch": -1,
        }
        response = await self._send(
            _BROKER_REGISTRATION, _REGISTRATION_VERSIONS, body, "broker_registration_refused"
        )
        if response is None:
            return self._after_failure()
        self.broker_epoch = int(response.broker_epoch)
        log_event(
            _log,
            logging.INFO,
            "broker_registered",
            node_id=self._config.node_id,
            broker_epoch=self.broker_epoch,
        )
        return 0.0

    async def _heartbeat(self) -> float:
        offline = sorted(self._offline_dirs)
        body = {
            "broker_id": self._config.node_id,
            "broker_epoch": self.broker_epoch,
            "current_metadata_offset": self._metadata_offset(),
            "want_fence": not self._ready_to_unfence,
            "want_shut_down": self.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN,
            "offline_log_dirs": offline,
        }
        response = await self._send(
            _BROKER_HEARTBEAT, _HEARTBEAT_VERSIONS, body, "broker_heartbeat_refused"
        )
        if response is None:
            return self._after_failure()
        return self._on_heartbeat_answer(response)

    def _on_heartbeat_answer(self, response: Any) -> float:
        """The next heartbeat's delay, after moving on as the answer allows (Kafka's
        BrokerHeartbeatResponseEvent)."""
        interval = self._config.heartbeat_interval_ms / 1000
        state = self.state
        if state is BrokerState.STARTING:
            if response.is_caught_up:
                self._transition(BrokerState.RECOVERY)
                if not self.initial_catch_up.done():
                    self.initial_catch_up.set_result(None)
            # Soon again: with no recovery to do, the broker is unfenced sooner.
            return _STARTING_HEARTBEAT_S
        if state is BrokerState.RECOVERY:
            if not response.is_fenced:
                self._transition(BrokerState.RUNNING)
                if not self.initial_unfence.done():
                    self.initial_unfence.set_result(None)
            return interval
        if state is BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            if response.should_shut_down:
                self._transition(BrokerState.SHUTTING_DOWN)
                if not self.controlled_shutdown.done():
                    self.controlled_shutdown.set_result(None)
                return interval
            first = not self._got_shutdown_answer
            self._got_shutdown_answer = True
            return _FIRST_SHUTDOWN_HEARTBEAT_S if first else interval
        return interval

    def _transition(self, state: BrokerState) -> None:
        log_event(
            _log,
            logging.INFO,
            "broker_state",
            node_id=self._config.node_id,
            previous=self.state.name,
            state=state.name,
        )
        self.state = state

    async def _send(
        self, api_key: int, versions: tuple[int, int], body: Any, refused_event: str
    ) -> Any:
        """The controller's answer if it accepted the request; None after a failure to
        get one in a session timeout, or a refusal (logged as ``refused_event``)."""
        try:
            response = await self._channel.send(
                api_key, versions, body, self._config.session_timeout_ms / 1000
            )
        except (TimeoutError, OSError, UnsupportedVersionError) as e:
            log_event(
                _log,
                logging.WARNING,
                "controller_request_failed",
                node_id=self._config.node_id,
                api_key=api_key,
                reason=str(e),
            )
            return None
        if response.error_code != 0:
            log_event(
                _log,
                logging.WARNING,
                refused_event,
                node_id=self._config.node_id,
                error=int(response.error_code),
            )
            return None
        self._failed_attempts = 0
        return response

    def _after_failure(self) -> float:
        """Kafka's ExponentialBackoff(100 ms, x2, session timeout, 2 % jitter)."""
        self._failed_attempts += 1
        exponent = min(self._failed_attempts - 1, 30)
        base: float = min(0.1 * 2.0**exponent, self._config.session_timeout_ms / 1000)
        return base * random.uniform(0.98, 1.02)
