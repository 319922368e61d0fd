"""What the RemoteLogManager's per-partition tasks share, and their run loop (Kafka's
RemoteLogManager.RLMTask).

Each task runs one round every ``remote.log.manager.task.interval.ms`` once the metadata
manager's view of its partition is ready. A round that fails (the object store
unreachable, a metadata write refused) is retried after an exponential backoff with
jitter (``remote.log.manager.task.retry.backoff.ms``, ``.backoff.max.ms``,
``.jitter``; Kafka's ExponentialBackoff), each failure logged as a warning naming the
partition and the error. Copy and delete are idempotent, so a retried round is safe.

Event-loop only; the blocking RemoteStorageManager calls run in the context's pools
(`run_blocking`), never on the loop.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

from tiercel.config.logging_setup import log_event
from tiercel.config.remote_log_manager_config import RemoteLogManagerConfig
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.daemon_thread_pool import DaemonThreadPoolExecutor
from tiercel.tiered.rlm_quota import RLMQuota
from tiercel.tiered.rlmm.remote_log_metadata_manager import RemoteLogMetadataManager
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
)

__all__ = ["RLMContext", "RLMTask", "RetryBackoff", "run_blocking"]

_log: Final = logging.getLogger("tiercel.remote_log_manager")

T = TypeVar("T")


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class RLMContext:
    """One RemoteLogManager's collaborators and shared state. Event-loop only, but for
    the pools and the storage manager, which the pools call."""

    config: RemoteLogManagerConfig
    broker_id: int
    rsm: RemoteStorageManager
    rlmm: RemoteLogMetadataManager
    copier_pool: DaemonThreadPoolExecutor
    expiration_pool: DaemonThreadPoolExecutor
    copy_quota: RLMQuota
    # Uploads whose copy thread has not returned: the expiration task leaves them alone
    # (Kafka's segmentIdsBeingCopied).
    segment_ids_being_copied: set[RemoteLogSegmentId] = field(default_factory=set)
    clock_ms: Callable[[], int] = _now_ms
    # Told of each segment whose objects are gone (the reader's index cache forgets it,
    # as Kafka's deleteRemoteLogSegment removes it from the RemoteIndexCache).
    segment_deleted_listeners: list[Callable[[RemoteLogSegmentMetadata], None]] = field(
        default_factory=list
    )
    # Told of an upload its copy task gave up when cancelled (this broker no longer
    # leads the partition), with an event set once the upload's thread has returned
    # (and deleted what it wrote): the RemoteLogManager retires its metadata.
    upload_abandoned: Callable[[RemoteLogSegmentMetadata, asyncio.Event], None] = (
        lambda metadata, returned: None
    )


async def run_blocking(
    pool: concurrent.futures.Executor,
    fn: Callable[..., T],
    *args: object,
    on_done: Callable[[], object] = lambda: None,
) -> T:
    """``fn(*args)`` in ``pool``, its result posted back to the loop. A caller cancelled
    meanwhile stops waiting; the call itself finishes in its thread, and ``on_done``
    runs (on the loop) once it has, whether or not anyone still waits — or at once if
    the pool refuses the call (shut down)."""
    loop = asyncio.get_running_loop()
    try:
        call = loop.run_in_executor(pool, functools.partial(fn, *args))
    except BaseException:
        on_done()
        raise

    def done(future: asyncio.Future[T]) -> None:
        # Retrieved even when no one waits any more, so asyncio reports nothing.
        if not future.cancelled():
            future.exception()
        on_done()

    call.add_done_callback(done)
    return await asyncio.shield(call)


class RetryBackoff:
    """Kafka's ExponentialBackoff: ``initial * 2**(failures-1)``, capped at ``maximum``,
    times a random factor in [1 - jitter, 1 + jitter]."""

    def __init__(self, initial_ms: int, maximum_ms: int, jitter: float) -> None:
        self._initial_ms = initial_ms
        self._maximum_ms = max(maximum_ms, initial_ms)
        self._jitter = jitter

    def backoff_ms(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        exponent = min(failures - 1, 62)
        base = min(self._initial_ms * 2.0**exponent, float(self._maximum_ms))
        return base * random.uniform(1 - self._jitter, 1 + self._jitter)


class RLMTask(abc.ABC):
    """One partition's periodic remote work. Event-loop only."""

    # The log event of a failed round.
    failure_event = "remote_task_failed"

    def __init__(self, context: RLMContext, partition: TopicIdPartition, log: UnifiedLog) -> None:
        self.context = context
        self.partition = partition
        self.log = log
        self.cancelled = False
        self.failures = 0
        config = context.config
        self._backoff = RetryBackoff(
            config.remote_log_manager_task_retry_backoff_ms,
            config.remote_log_manager_task_retry_backoff_max_ms,
            config.remote_log_manager_task_retry_jitter,
        )

    @abc.abstractmethod
    async def run_once(self) -> None:
        """One round; raises to have it retried after a backoff."""

    def cancel(self) -> None:
        self.cancelled = True

    def is_cancelled(self) -> bool:
        """Whether `cancel` was called: checked again after every await."""
        return self.cancelled

    async def run(self) -> None:
        interval_ms = self.context.config.remote_log_manager_task_interval_ms
        while not self.cancelled:
            await self.run_guarded()
            delay_ms = self._backoff.backoff_ms(self.failures) if self.failures else interval_ms
            await asyncio.sleep(delay_ms / 1000)

    async def run_guarded(self) -> bool:
        """One round if the partition's metadata is ready; False if it failed."""
        if self.cancelled or self.log.deleted or not self.context.rlmm.is_ready(self.partition):
            return True
        try:
            await self.run_once()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.failures += 1
            log_event(
                _log,
                logging.WARNING,
                self.failure_event,
                partition=str(self.log.topic_partition),
                error=repr(e),
                attempt=self.failures,
            )
            return False
        self.failures = 0
        return True
