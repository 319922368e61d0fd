"""The ISR's background work on a broker: Kafka's "isr-expiration" task, which every
replica.lag.time.max.ms / 2 asks each partition this broker leads to drop the followers
that fell behind (Partition.maybeShrinkIsr), and the AlterPartition writes partitions
start when their ISR changes.

Those writes retry until the metadata store answers, so they are tracked here and
cancelled at shutdown: a SIGTERM during a ZooKeeper outage must not wait for ZooKeeper.
After shutdown no new write starts.

Event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from typing import Any, Final

from tiercel.config.logging_setup import log_event
from tiercel.server.partition import Partition
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

__all__ = ["IsrExpiration"]

_log: Final = logging.getLogger("tiercel.replica_manager")


class IsrExpiration:
    """The isr-expiration task over ``partitions`` (the ReplicaManager's map, read live)
    and the ISR writes spawned through `spawn_isr_write`."""

    def __init__(
        self,
        scheduler: Scheduler,
        partitions: Mapping[TopicPartition, Partition],
        replica_lag_time_max_ms: int,
    ) -> None:
        self._scheduler = scheduler
        self._partitions = partitions
        self._replica_lag_time_max_ms = replica_lag_time_max_ms
        self._task: asyncio.Task[None] | None = None
        self._isr_writes: set[asyncio.Task[None]] = set()
        self._closed = False

    def spawn_isr_write(self, coro: Coroutine[Any, Any, None], name: str) -> object:
        """Run an ISR write in the background (`ReplicationContext.spawn`); after
        shutdown the write is dropped."""
        if self._closed:
            coro.close()
            return None
        task: asyncio.Task[None] = self._scheduler.spawn(coro, name)
        self._isr_writes.add(task)
        task.add_done_callback(self._isr_writes.discard)
        return task

    def startup(self) -> None:
        """Start the task: every replica.lag.time.max.ms / 2, as Kafka's
        ReplicaManager.startup schedules "isr-expiration"."""
        interval_s = self._replica_lag_time_max_ms / 2000
        if interval_s > 0:  # as for Kafka's scheduler, a zero period schedules nothing
            self._task = asyncio.get_running_loop().create_task(
                self._expire_isr(interval_s), name="isr-expiration"
            )

    async def _expire_isr(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            for partition in list(self._partitions.values()):
                try:
                    partition.maybe_shrink_isr()
                except Exception as e:
                    log_event(
                        _log,
                        logging.ERROR,
                        "isr_expiration_failed",
                        partition=str(partition.topic_partition),
                        reason=repr(e),
                    )

    def shutdown(self) -> None:
        """Stop the task and cancel the ISR writes still retrying."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        for task in list(self._isr_writes):
            task.cancel()
