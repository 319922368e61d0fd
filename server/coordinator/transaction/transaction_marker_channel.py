"""TransactionMarkerChannelManager: the coordinator's half of ending a transaction
(Kafka's TransactionMarkerChannelManager and TransactionMarkerRequestCompletionHandler).

Once PrepareCommit or PrepareAbort is written, the COMMIT or ABORT marker must reach
every partition of the transaction: one WriteTxnMarkers (27, v1) request per partition
leader (found in this broker's metadata cache), carrying the producer id and epoch and
the coordinator epoch. A partition whose leader is unknown, moved, or not yet caught up
is retried after a backoff until its leader has the marker, as is one whose request
failed in any way (the sender never dies); a partition whose topic was deleted is
dropped (Kafka's behaviour). A leader that refuses with
TRANSACTION_COORDINATOR_FENCED has seen a newer coordinator: this one stops. When every
partition has its marker, CompleteCommit/CompleteAbort is written (retried while the
write fails with a retriable error and this broker still owns the id).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, Final

from tiercel.config.logging_setup import log_event
from tiercel.config.sasl_config import SaslLogin
from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.coordinator.transaction.transaction_metadata import (
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.replication.broker_client import BrokerClients
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

WRITE_TXN_MARKERS_KEY: Final = 27
_WRITE_TXN_MARKERS_VERSIONS: Final = (1, 1)
RETRY_BACKOFF_MS: Final = 100
_log: Final = logging.getLogger("tiercel.transaction_coordinator")

# Errors after which the leader (or the partition's leadership) may change: look the
# leader up again and retry (Kafka's completion handler retries these).
_RETRIABLE: Final = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.unknown_server_error,
    }
)
# The leader has a newer producer epoch or coordinator: this coordinator's view is
# stale; stop sending (the current coordinator ends the transaction).
_ABANDON: Final = frozenset(
    {ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced}
)

# A leader that is down, unknown or slow: expected, retried quietly.
_UNREACHABLE: Final = (OSError, TimeoutError, KafkaError, EOFError, asyncio.IncompleteReadError)

# A failed CompleteCommit/CompleteAbort write that may succeed later on this broker.
_RETRIABLE_COMPLETE_ERRORS: Final = frozenset(
    {ErrorCode.coordinator_not_available, ErrorCode.unknown_server_error}
)
# Writes CompleteCommit/CompleteAbort: (transactional id, coordinator epoch, transit).
CompleteWriter = Callable[[str, int, TxnTransitMetadata], Awaitable[ErrorCode]]


class TransactionMarkerChannelManager:
    """Invariants: one sending task per transactional id at a time (a new one replaces
    the old only after the old finished, since a transaction cannot end twice).

    Event-loop only.
    """

    def __init__(
        self,
        node_id: int,
        cache: MetadataCache,
        scheduler: Scheduler,
        inter_broker_listener: str,
        request_timeout_ms: int,
        write_complete: CompleteWriter,
        ssl_context: ssl.SSLContext | None = None,
        sasl_login: SaslLogin | None = None,
    ) -> None:
        self._cache = cache
        self._scheduler = scheduler
        self._write_complete = write_complete
        self._clients = BrokerClients(
            lambda broker_id: cache.broker_endpoint(broker_id, inter_broker_listener),
            f"tiercel-txn-marker-sender-{node_id}",
            request_timeout_ms / 1000,
            ssl_context,
            sasl_login,
        )
        self._locks: dict[int, asyncio.Lock] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.markers_sent = 0

    def add_txn_markers_to_send(
        self,
        coordinator_epoch: int,
        metadata: TransactionMetadata,
        transit: TxnTransitMetadata,
        still_owned: Callable[[], bool],
    ) -> None:
        """Send the markers of a transaction in Prepare*, then write ``transit``."""
        transactional_id = metadata.transactional_id
        task = self._scheduler.spawn(
            self._send_and_complete(coordinator_epoch, metadata, transit, still_owned),
            f"txn-markers {transactional_id}",
        )
        self._tasks[transactional_id] = task
        task.add_done_callback(lambda t: self._forget(transactional_id, t))

    def _forget(self, transactional_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(transactional_id) is task:
            del self._tasks[transactional_id]

    @property
    def pending_count(self) -> int:
        return len(self._tasks)

    async def _send_and_complete(
        self,
        coordinator_epoch: int,
        metadata: TransactionMetadata,
        transit: TxnTransitMetadata,
        still_owned: Callable[[], bool],
    ) -> None:
        committed = transit.txn_state == TransactionState.COMPLETE_COMMIT
        if await self._send_all(coordinator_epoch, metadata, committed, still_owned):
            self.markers_sent += 1
            await self._complete(coordinator_epoch, metadata, transit, still_owned)

    async def _send_all(
        self,
        coordinator_epoch: int,
        metadata: TransactionMetadata,
        committed: bool,
        still_owned: Callable[[], bool],
    ) -> bool:
        """True once every partition's leader has the marker; False if this coordinator
        lost the id or must abandon the transaction."""
        remaining = set(metadata.topic_partitions)
        while remaining:
            if not still_owned():
                return False
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            for tp in list(remaining):
                if self._cache.topic(tp.topic) is None:
                    remaining.discard(tp)  # the topic is gone: nothing to mark
                    continue
                state = self._cache.partition_state(tp)
                if state is not None and state.leader >= 0:
                    by_leader[state.leader].append(tp)
            results = await asyncio.gather(
                *(
                    self._send(leader, tps, metadata, coordinator_epoch, committed)
                    for leader, tps in by_leader.items()
                )
            )
            for done, abandon in results:
                remaining -= done
                if abandon:
                    log_event(
                        _log,
                        logging.WARNING,
                        "txn_markers_abandoned",
                        transactional_id=metadata.transactional_id,
                        coordinator_epoch=coordinator_epoch,
                    )
                    return False
            if remaining:
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
        return True

    async def _complete(
        self,
        coordinator_epoch: int,
        metadata: TransactionMetadata,
        transit: TxnTransitMetadata,
        still_owned: Callable[[], bool],
    ) -> None:
        """Write CompleteCommit/CompleteAbort, again while the write fails retriably."""
        transactional_id = metadata.transactional_id
        while still_owned():
            error = await self._write_complete(transactional_id, coordinator_epoch, transit)
            if error == ErrorCode.none:
                return
            if error not in _RETRIABLE_COMPLETE_ERRORS:
                log_event(
                    _log,
                    logging.WARNING,
                    "txn_complete_write_failed",
                    transactional_id=transactional_id,
                    error=error.name,
                )
                return
            await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
            if metadata.pending_state is not None or metadata.state not in (
                TransactionState.PREPARE_COMMIT,
                TransactionState.PREPARE_ABORT,
            ):
                return
            transit = metadata.prepare_complete(transit.txn_last_update_timestamp)

    async def _send(
        self,
        leader: int,
        tps: list[TopicPartition],
        metadata: TransactionMetadata,
        coordinator_epoch: int,
        committed: bool,
    ) -> tuple[set[TopicPartition], bool]:
        """(partitions the leader has marked, whether to abandon the transaction)."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp.partition)
        body = {
            "markers": [
                {
                    "producer_id": metadata.producer_id,
                    "producer_epoch": metadata.producer_epoch,
                    "transaction_result": committed,
                    "topics": [
                        {"name": topic, "partition_indexes": sorted(ps)}
                        for topic, ps in sorted(by_topic.items())
                    ],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        }
        lock = self._locks.setdefault(leader, asyncio.Lock())
        try:
            async with lock:  # BrokerClient serves one request at a time
                _, response = await self._clients.get(leader).request(
                    WRITE_TXN_MARKERS_KEY, _WRITE_TXN_MARKERS_VERSIONS, body
                )
            return _marked(response, metadata.transactional_id)
        except _UNREACHABLE as e:
            log_event(_log, logging.DEBUG, "txn_marker_send_failed", leader=leader, reason=repr(e))
        except Exception as e:
            # A response that does not decode (FrameError: a bad size, a correlation id
            # mismatch) or a bug: the sender must not die of it, or the transaction stays
            # in Prepare* until its partition is reloaded. Retried like a disconnection,
            # whose markers Kafka's TransactionMarkerRequestCompletionHandler re-enqueues.
            log_event(_log, logging.ERROR, "txn_marker_send_failed", leader=leader, reason=repr(e))
            _log.debug("traceback", exc_info=e)
        return set(), False

    async def shutdown(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._clients.close()


def _marked(response: Any, transactional_id: str) -> tuple[set[TopicPartition], bool]:
    done: set[TopicPartition] = set()
    abandon = False
    for marker in response.markers:
        for topic in marker.topics:
            for partition in topic.partitions:
                tp = TopicPartition(topic.name, partition.partition_index)
                error = ErrorCode(partition.error_code)
                if error == ErrorCode.none:
                    done.add(tp)
                elif error in _ABANDON:
                    abandon = True
                elif error not in _RETRIABLE:
                    # Kafka treats the rest as a broker bug (IllegalStateException); keep
                    # retrying rather than leave the transaction hanging, and say so.
                    log_event(
                        _log,
                        logging.ERROR,
                        "txn_marker_unexpected_error",
                        transactional_id=transactional_id,
                        partition=str(tp),
                        error=error.name,
                    )
    return done, abandon
