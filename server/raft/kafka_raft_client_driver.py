"""The task that drives a Raft client (Kafka's ``KafkaRaftClientDriver``): poll after
poll while the client runs; a graceful shutdown lets a leader hand over before the
polling stops. Event-loop only."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from tiercel.server.raft.kafka_raft_client import KafkaRaftClient

__all__ = ["KafkaRaftClientDriver"]

_log: Final = logging.getLogger("tiercel.raft")


class KafkaRaftClientDriver:
    """Invariant: at most one polling task, started once."""

    def __init__(self, client: KafkaRaftClient[Any]) -> None:
        self.client = client
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("The raft client driver is already started")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="raft poll")

    async def _run(self) -> None:
        try:
            while self.client.is_running:
                await self.client.poll()
        except Exception:
            # Kafka's driver hands this to the fatal fault handler: a replica that cannot
            # poll must not go on answering as if it could.
            _log.exception("the raft client failed; it polls no more")
            raise

    async def shutdown(self, timeout_ms: int) -> None:
        """Resign if leading, wait up to ``timeout_ms`` for a successor, stop polling and
        flush the log."""
        task = self._task
        if task is None:
            await self.client.close()
            return
        if not task.done():
            self.client.shutdown(timeout_ms)
        # A failed task was logged when it failed; the log is flushed all the same.
        await asyncio.gather(task, return_exceptions=True)
        await self.client.close()
