"""DelayedRemoteFetch: a consumer fetch waiting for a read from the remote tier (Kafka's
DelayedRemoteFetch, KIP-405).

When a fetch's local reads do not complete it and one of its partitions must be read
from the remote tier, that read (the first such partition's, as Kafka's) starts in the
RemoteLogManager's reader pool and the response waits for it in the fetch purgatory at
most ``remote.fetch.max.wait.ms``, or until the partition's leadership moves or the
broker shuts down. The other partitions keep what their local read gave. When the read
finishes in time its bytes replace the partition's empty result; when it fails, the
partition gets the error; when it is late, the partition answers no records and the
read is cancelled (Kafka's onExpiration, ``Future.cancel(false)``): a read still waiting
for a thread gives its place in the pool back at once, one reading from the store
finishes that call first (`RemoteStorageThreadPool.run`). Kafka cancels only on
expiration; here a read whose wait ended because the leadership moved or the broker
stops is cancelled too, since nothing will use its result. A pool with no room
(``remote.log.reader.max.pending.tasks``) answers the partition an error at once, as
Kafka's RejectedExecutionException path: without the cancellation a consumer that
retries each late fetch would start a read per retry while the late ones ran on.

Event-loop only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import KafkaError, UnknownServerError
from tiercel.server.delayed_fetch import FetchResult
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.partition import Partition
from tiercel.server.purgatory import Purgatory
from tiercel.server.remote_log_reads import RemoteLogReads
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.remote_storage_thread_pool import RejectedExecutionError
from tiercel.tiered.rsm.remote_storage_manager import RemoteStorageError

__all__ = ["DEFAULT_REMOTE_FETCH_MAX_WAIT_MS", "DelayedRemoteFetch"]

_log: Final = logging.getLogger("tiercel.remote_fetch")

# remote.fetch.max.wait.ms default (Kafka)
DEFAULT_REMOTE_FETCH_MAX_WAIT_MS: Final = 500


def _remote_error(error: BaseException, tp: TopicPartition) -> KafkaError:
    if isinstance(error, RemoteStorageError | RejectedExecutionError):
        # Kafka's Errors.forException of a RemoteStorageException or a rejection.
        log_event(
            _log, logging.WARNING, "remote_fetch_failed", partition=str(tp), reason=repr(error)
        )
        return UnknownServerError(f"reading {tp} from the remote tier: {error}")
    if isinstance(error, Exception):
        return as_kafka_error(error, f"remote fetch from {tp}")
    raise error


class DelayedRemoteFetch:
    """One fetch's wait for its remote read. Invariant: ``results`` keeps one entry per
    requested partition, in request order."""

    def __init__(
        self,
        results: list[FetchResult],
        remote_log_manager: RemoteLogReads | None,
        partitions: Mapping[TopicPartition, Partition],
        purgatory: Purgatory,
        remote_fetch_max_wait_ms: int,
    ) -> None:
        self.results = list(results)
        self._rlm = remote_log_manager
        self._partitions = partitions
        self._purgatory = purgatory
        self._max_wait_s = remote_fetch_max_wait_ms / 1000

    async def complete(self) -> list[FetchResult]:
        """The fetch's results once its remote read is done or late."""
        index = next(
            (i for i, r in enumerate(self.results) if r.remote_fetch_info is not None), None
        )
        if index is None:
            return self.results
        result = self.results[index]
        info = result.remote_fetch_info
        assert info is not None and result.read is not None
        tp = info.topic_id_partition.topic_partition
        partition = self._partitions.get(tp)
        if partition is None or self._rlm is None:
            # Gone meanwhile, or tiering on with no RemoteLogManager (a broker bug).
            self.results[index] = FetchResult(None, UnknownServerError(f"{tp}: no remote reads"))
            return self.results
        throttle_s = self._rlm.fetch_throttle_time_s()
        if throttle_s > 0:
            # remote.log.manager.fetch.max.bytes.per.second is spent: no records from the
            # tier this time (Kafka's isRemoteLogFetchQuotaExceeded), after a wait so
            # that the consumer does not spin on empty answers.
            await asyncio.sleep(min(throttle_s, self._max_wait_s))
            return self.results
        try:
            log = partition.log
            task = self._rlm.async_read(info, log.leader_epoch_cache, log.local_log)
        except RejectedExecutionError as e:
            self.results[index] = FetchResult(None, _remote_error(e, tp))
            return self.results
        epoch = partition.leader_epoch

        def done_or_moved() -> bool:  # Kafka's DelayedRemoteFetch.tryComplete
            current = self._partitions.get(tp)
            moved = current is None or not current.is_leader or current.leader_epoch != epoch
            return task.done() or moved

        task.add_done_callback(lambda _: self._purgatory.check_and_complete(tp))
        await self._purgatory.try_complete_else_watch([tp], done_or_moved, self._max_wait_s)
        if not task.done():
            # Late, the leadership moved, or shutdown: this partition answers no records.
            task.cancel()
            log_event(_log, logging.DEBUG, "remote_fetch_expired", partition=str(tp))
            return self.results
        error = task.exception()
        if error is not None:
            self.results[index] = FetchResult(None, _remote_error(error, tp))
        else:
            read = dataclasses.replace(result.read, info=task.result())
            self.results[index] = FetchResult(read)
        return self.results
