"""LogDirFailureHandler: what the broker does when a log dir goes offline.

Kafka's ReplicaManager.LogDirFailureHandler thread with handleLogDirFailure and
LogManager.handleLogDirFailure: for each dir the `LogDirFailureChannel` reports, the
dir's replicas go offline on this broker (fetchers stopped, out of the partition map,
KAFKA_STORAGE_ERROR to produce and fetch), its logs are dropped without a flush or a
checkpoint, and the controller is told, so that it moves leadership to other ISR
members: a KRaft broker's heartbeats name the failed dir (Kafka's
BrokerLifecycleManager.propagateDirectoryFailure), a single node's controller reads a
notification in its store. With no live
log dir left the broker halts (exit code 1), as Kafka does, without the clean-shutdown
marker: the next start recovers from the recovery points checkpointed before the failure.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Final, Protocol

from tiercel.config.logging_setup import log_event
from tiercel.server.metadata.log_dir_event import LogDirEvent, propagate_log_dir_event
from tiercel.server.metadata.store import MetadataStore, MetadataStoreError
from tiercel.server.replica_manager import ReplicaManager
from tiercel.storage.log_manager import LogManager

_log: Final = logging.getLogger("tiercel.log_dir_failure")
# Between tries to publish a log-dir event while the store is unavailable.
_RETRY_S: Final = 0.5


def halt(status: int) -> None:
    """Kafka's Exit.halt: stop now, running no shutdown code, after the log is out."""
    logging.shutdown()
    os._exit(status)


class LogDirEventSink(Protocol):
    """Where the controller learns of a failed log dir."""

    async def publish(self, event: LogDirEvent) -> None:
        """Raises MetadataStoreError while the event cannot be published yet."""


class StoreLogDirEvents:
    """The event as a notification node in the MetadataStore, for the single node's
    controller (Kafka's ZooKeeper-era propagateLogDirEvent)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def publish(self, event: LogDirEvent) -> None:
        await propagate_log_dir_event(self._store, event)


class LogDirFailureHandler:
    """Event-loop only. Handles each offline dir once, in the order they failed."""

    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        replica_manager: ReplicaManager,
        events: LogDirEventSink,
        halt: Callable[[int], None] = halt,
    ) -> None:
        self._node_id = node_id
        self._log_manager = log_manager
        self._replica_manager = replica_manager
        self._sink = events
        self._halt = halt
        self._task: asyncio.Task[None] | None = None

    def startup(self) -> None:
        """Start taking offline dirs; call after the broker registered."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="log-dir-failure")

    async def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        channel = self._log_manager.log_dir_failure_channel
        while True:
            log_dir = await channel.take_next_offline_log_dir()
            await self.handle_log_dir_failure(log_dir)

    async def handle_log_dir_failure(self, log_dir: str) -> None:
        log_manager = self._log_manager
        partitions = log_manager.handle_log_dir_failure(log_dir)
        self._replica_manager.mark_partitions_offline(partitions)
        log_event(
            _log,
            logging.ERROR,
            "partitions_offline",
            dir=log_dir,
            partitions=",".join(str(tp) for tp in sorted(partitions)),
        )
        if not log_manager.log_dirs:
            failed = ", ".join(log_manager.offline_log_dirs)
            log_event(
                _log,
                logging.CRITICAL,
                "broker_halted",
                reason=f"Shutdown broker because all log dirs in {failed} have failed",
            )
            self._halt(1)
            return
        await self._publish(LogDirEvent(self._node_id, log_dir, tuple(sorted(partitions))))

    async def _publish(self, event: LogDirEvent) -> None:
        while True:
            try:
                await self._sink.publish(event)
                return
            except MetadataStoreError as e:
                log_event(_log, logging.ERROR, "log_dir_event_failed", reason=repr(e))
                await asyncio.sleep(_RETRY_S)
