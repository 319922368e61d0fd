"""The active controller's periodic writes (the deferred events Kafka's QuorumController
schedules on claiming): a NoOpRecord every ``metadata.max.idle.interval.ms``
(``maybeScheduleNextWriteNoOpRecord``), fencing of brokers whose session expired, when the
first session ends (``rescheduleMaybeFenceStaleBrokers``), preferred elections every
leader imbalance check interval (``maybeScheduleNextBalancePartitionLeaders``) and unclean
elections for topics that allow them (``maybeScheduleNextElectUncleanLeaders``); an
election run that hit its bound runs again 10 ms later.

Each task only submits a write event; the event queue serializes it with everything
else. The tasks live for one leadership: the controller cancels them when it renounces,
and a write that finds the controller no longer active is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tiercel.protocol.errors import NotControllerError
from tiercel.protocol.metadata.log_control_records import NoOpRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.controller.control_managers import ControlManagers
from tiercel.server.controller.controller_result import ControllerResult
from tiercel.server.controller.quorum_controller_config import QuorumControllerConfig
from tiercel.server.raft.timer import Time

__all__ = ["ControllerPeriodicTasks"]

T = TypeVar("T")

Write = Callable[[str, Callable[[], ControllerResult[Any]]], Awaitable[Any]]
# A run of either election task that hit max_elections_per_imbalance goes again this soon.
_AGAIN_MS = 10


class ControllerPeriodicTasks:
    """Event-loop only; started on the loop, stopped with `cancel`."""

    def __init__(
        self,
        config: QuorumControllerConfig,
        time: Time,
        state: Callable[[], ControlManagers],
        write: Write,
    ) -> None:
        self._config = config
        self._time = time
        self._state = state
        self._write = write
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._write_no_op_records()),
            loop.create_task(self._fence_stale_brokers()),
            loop.create_task(
                self._elect(
                    "maybeElectUncleanLeaders",
                    config.unclean_leader_election_check_interval_ms,
                    lambda: self._state().replication.maybe_elect_unclean_leaders(
                        config.max_elections_per_imbalance
                    ),
                )
            ),
        ]
        if config.leader_imbalance_check_interval_ms is not None:
            self._tasks.append(
                loop.create_task(
                    self._elect(
                        "maybeBalancePartitionLeaders",
                        config.leader_imbalance_check_interval_ms,
                        lambda: self._state().replication.maybe_balance_partition_leaders(
                            config.max_elections_per_imbalance
                        ),
                    )
                )
            )

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _submit(self, name: str, op: Callable[[], ControllerResult[T]]) -> T | None:
        try:
            result: T = await self._write(name, op)
        except NotControllerError:
            return None
        return result

    async def _write_no_op_records(self) -> None:
        # Readers see the log and the high watermark advance even when nothing changes.
        while True:
            await asyncio.sleep(self._config.max_idle_interval_ms / 1000)
            await self._submit(
                "writeNoOpRecord",
                lambda: ControllerResult([ApiMessageAndVersion(NoOpRecord(), 0)], None),
            )

    async def _fence_stale_brokers(self) -> None:
        while True:
            cluster = self._state().cluster
            unfenced = [b for b, r in cluster.broker_registrations.items() if not r.fenced]
            heartbeats = cluster.heartbeat_manager
            next_check = None if heartbeats is None else heartbeats.next_check_time_ms(unfenced)
            if next_check is None:
                delay_ms = self._config.session_timeout_ms
            else:
                delay_ms = max(1, next_check - self._time.milliseconds())
            await asyncio.sleep(delay_ms / 1000)
            await self._submit(
                "maybeFenceReplicas",
                lambda: self._state().replication.maybe_fence_one_stale_broker(),
            )

    async def _elect(
        self, name: str, interval_ms: int, op: Callable[[], ControllerResult[bool]]
    ) -> None:
        delay_ms = interval_ms
        while True:
            await asyncio.sleep(delay_ms / 1000)
            more = await self._submit(name, op)
            delay_ms = _AGAIN_MS if more else interval_ms
