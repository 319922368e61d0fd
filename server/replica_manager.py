"""ReplicaManager: this broker's partitions, produce, fetch, ListOffsets, DeleteRecords.

Event-loop only. It owns the partition map (Kafka's allPartitions), turns Kafka errors
into per-partition results so that one bad partition never fails a request, completes
delayed operations (fetches when appends make data available or, for followers, the
high watermark moves; produces when the high watermark covers them; DeleteRecords when
the low watermark reaches them), and applies leadership from the metadata listener: a
partition this broker leads is served here, one it follows goes to the replica fetcher
of its leader (Kafka's ReplicaFetcherManager). The ISR-expiration task runs every
replica.lag.time.max.ms / 2 (Kafka's isr-expiration).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.log_config import LogConfig
from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import (
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from tiercel.protocol.list_offsets import (
    OFFSET_NOT_AVAILABLE_MIN_VERSION,
    IsolationLevel,
    is_timestamp_unsupported,
)
from tiercel.server.delayed_delete_records import (
    DelayedDeleteRecords,
    DeleteRecordsPartitionStatus,
    delete_records_on_local_log,
)
from tiercel.server.delayed_fetch import (
    FetchPartitionStatus,
    FetchRequestPartition,
    FetchResult,
    bytes_available,
)
from tiercel.server.delayed_produce import DelayedProduce, ProducePartitionStatus
from tiercel.server.delayed_remote_fetch import (
    DEFAULT_REMOTE_FETCH_MAX_WAIT_MS,
    DelayedRemoteFetch,
)
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.offset_by_timestamp import DEFAULT_REMOTE_LIST_OFFSETS_TIMEOUT_MS
from tiercel.server.partition import (
    Partition,
    PartitionState,
    ReplicationContext,
)
from tiercel.server.partition_isr import AlterPartitionManager
from tiercel.server.purgatory import Purgatory
from tiercel.server.read_from_log import read_from_log
from tiercel.server.remote_log_reads import RemoteLogReads
from tiercel.server.replication.fetch_state import InitialFetchState
from tiercel.server.replication.fetcher_factory import replica_fetcher_factory
from tiercel.server.replication.replica_fetcher_manager import ReplicaFetcherManager
from tiercel.storage.log_manager import LogManager
from tiercel.storage.log_validator import (
    DecompressionBudgetExceeded,
    ValidatedRecords,
    validate_records,
    validation_is_costly,
)
from tiercel.storage.log_values import (
    FetchIsolation,
    LogAppendInfo,
    TimestampAndOffset,
)
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.replica_manager")

LogConfigFor = Callable[[str], LogConfig]
# Told (partition, leader epoch) when this broker becomes or stays leader with a new
# state, (partition, None) when it stops leading it; the group coordinator follows the
# leadership of __consumer_offsets this way (Kafka's onLeadershipChange callback).
LeadershipListener = Callable[[TopicPartition, int | None], None]
# Kafka's Topic.isInternal: clients cannot produce to these, only coordinators.
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})
# Decompressing this much to validate a batch is fine on the event loop (about a
# millisecond); a batch that expands further is validated in the executor.
LOOP_DECOMPRESSION_BUDGET: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error: KafkaError | None = None
    info: LogAppendInfo | None = None


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    error: KafkaError | None = None
    found: TimestampAndOffset | None = None


def _clock_ms() -> int:
    return int(time.time() * 1000)


# One partition's append as its leader: (partition, its handle, now, acks) -> result.
LeaderAppend = Callable[[TopicPartition, Partition, int, int], Awaitable[LogAppendInfo]]


class ReplicaManager:
    """Invariants: ``partitions`` holds every replica assigned here that the metadata
    named; a partition followed from broker L is in L's fetcher and nowhere else, one
    this broker leads (or whose leader is unknown) in no fetcher. Event-loop only."""

    def __init__(
        self,
        config: BrokerConfig,
        node_id: int,
        log_manager: LogManager,
        scheduler: Scheduler,
        log_config_for: LogConfigFor,
        metadata_cache: MetadataCache,
        alter_partition: AlterPartitionManager,
    ) -> None:
        self._config = config
        self.node_id = node_id
        self._log_manager = log_manager
        self._scheduler = scheduler
        self._log_config_for = log_config_for
        self.partitions: dict[TopicPartition, Partition] = {}
        self.offline_partitions: set[TopicPartition] = set()  # HostedPartition.Offline
        self.fetch_purgatory = Purgatory("fetch")
        self.produce_purgatory = Purgatory("produce")
        self.delete_records_purgatory = Purgatory("deleteRecords")
        self.leadership_listeners: list[LeadershipListener] = []
        self._replication = ReplicationContext(
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            alter_partition=alter_partition,
            # Kafka's ZooKeeper-mode rule: a broker may join an ISR while it is registered.
            is_replica_isr_eligible=metadata_cache.is_broker_isr_eligible,
            is_broker_alive=lambda broker_id: broker_id in metadata_cache.brokers,
            on_delayed_work=self._complete_delayed,
            spawn=self._spawn_isr_write,
            clock_ms=_clock_ms,
        )
        self.fetcher_manager = ReplicaFetcherManager(
            replica_fetcher_factory(
                config,
                node_id,
                metadata_cache,
                self.partitions.get,
                lambda: self.remote_log_manager,
            )
        )
        self._isr_expiration: asyncio.Task[None] | None = None
        # ISR writes retry until the store answers: shutdown cancels them, or a SIGTERM
        # during a ZooKeeper outage would wait for ZooKeeper.
        self._isr_writes: set[asyncio.Task[None]] = set()
        self._closed = False
        # The broker's RemoteLogManager, once tiering is on (KIP-405): remote reads.
        self.remote_log_manager: RemoteLogReads | None = None
        self.remote_fetch_max_wait_ms = DEFAULT_REMOTE_FETCH_MAX_WAIT_MS

    @property
    def closed(self) -> bool:
        """Shut down: metadata must no longer start fetchers or change logs."""
        return self._closed

    def _spawn_isr_write(self, coro: Coroutine[Any, Any, None], name: str) -> object:
        if self._closed:
            coro.close()
            return None
        task: asyncio.Task[None] = self._scheduler.spawn(coro, name)
        self._isr_writes.add(task)
        task.add_done_callback(self._isr_writes.discard)
        return task

    def startup(self) -> None:
        """Start the ISR-expiration task: every replica.lag.time.max.ms / 2, as Kafka's
        ReplicaManager.startup schedules "isr-expiration"."""
        interval_s = self._config.replica_lag_time_max_ms / 2000
        if interval_s > 0:  # as for Kafka's scheduler, a zero period schedules nothing
            self._isr_expiration = asyncio.get_running_loop().create_task(
                self._expire_isr(interval_s), name="isr-expiration"
            )

    async def _expire_isr(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            for partition in list(self.partitions.values()):
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

    def _complete_delayed(self, tp: TopicPartition) -> None:
        self.fetch_purgatory.check_and_complete(tp)
        self.produce_purgatory.check_and_complete(tp)
        self.delete_records_purgatory.check_and_complete(tp)

    # -- partitions --------------------------------------------------------------------

    def get_partition_or_error(self, tp: TopicPartition) -> Partition:
        partition = self.partitions.get(tp)
        if partition is None or partition.log.deleted:
            if tp in self.offline_partitions:
                raise KafkaStorageError(f"the log dir of {tp} failed on broker {self.node_id}")
            raise UnknownTopicOrPartitionError(f"this broker does not host {tp}")
        return partition

    def mark_partitions_offline(self, tps: Collection[TopicPartition]) -> None:
        self.offline_partitions.update(tps)
        for tp in self.offline_partitions.intersection(self.partitions):
            self._drop_partition(tp, "log dir failed")

    async def on_topic(self, name: str, topic: TopicMetadata | None) -> None:
        """Apply a topic's metadata: create logs for the partitions assigned here, lead
        or follow them per their states, update log configs, and delete the replicas of
        a deleted topic or of partitions no longer assigned here (a reassignment moved
        them away: Kafka's StopReplica with deletion)."""
        if topic is None:
            await self._remove_topic(name)
            return
        config = self._log_config_for(name)
        followers: dict[TopicPartition, InitialFetchState] = {}
        for partition_id, replicas in sorted(topic.replicas.items()):
            tp = TopicPartition(name, partition_id)
            if self.node_id not in replicas or tp in self.offline_partitions:
                if tp in self.partitions:
                    self._drop_partition(tp, "replica reassigned away")
                continue
            partition = self.partitions.get(tp)
            if partition is not None and partition.topic_id != topic.topic_id:
                # The topic was deleted and recreated while this partition was ours.
                self._drop_partition(tp, "topic id changed")
                partition = None
            if partition is None:
                partition = self._create_partition(tp, topic, config)
            elif partition.log.config != config:
                self._log_manager.update_log_config(partition.log, config)
            state = topic.states.get(partition_id)
            if state is None:
                continue
            if state.leader == self.node_id:
                self._become_leader(partition, state)
            else:
                initial = self._become_follower(partition, state)
                if initial is not None:
                    followers[tp] = initial
        if followers:
            self.fetcher_manager.add_fetcher_for_partitions(followers)

    def _become_leader(self, partition: Partition, state: PartitionState) -> None:
        tp = partition.topic_partition
        self.fetcher_manager.remove_fetcher_for_partitions((tp,))
        changed = partition.make_leader(state)
        self._complete_delayed(tp)
        if changed:
            self._leadership_changed(tp, state.leader_epoch)

    def _become_follower(
        self, partition: Partition, state: PartitionState
    ) -> InitialFetchState | None:
        """Follow ``state.leader``: the fetch state to (re)start the fetcher with, or None
        when its fetcher is already right (or there is no leader to follow)."""
        tp = partition.topic_partition
        was_leader = partition.is_leader
        changed = partition.make_follower(state)
        self._complete_delayed(tp)
        if was_leader and not partition.is_leader:
            self._leadership_changed(tp, None)
        current = partition.state  # a stale ``state`` was not applied
        if current.leader == self.node_id:
            return None
        if current.leader < 0:
            self.fetcher_manager.remove_fetcher_for_partitions((tp,))
            return None
        following = self.fetcher_manager.fetch_state(tp)
        if (
            not changed
            and following is not None
            and following[0] == current.leader
            and following[1].current_leader_epoch == current.leader_epoch
        ):
            return None
        return InitialFetchState(
            partition.topic_id,
            current.leader,
            current.leader_epoch,
            partition.initial_fetch_offset(),
        )

    def _create_partition(
        self, tp: TopicPartition, topic: TopicMetadata, config: LogConfig
    ) -> Partition:
        log = self._log_manager.get_or_create_log(tp, config, topic.topic_id)
        if log.topic_id is None:
            self._log_manager.set_topic_id(log, topic.topic_id)
        elif log.topic_id != topic.topic_id:
            # A log left by an earlier topic of the same name (deleted while this broker
            # was down): never serve its records under the new topic (Kafka's stray log).
            self._log_manager.delete_log(tp, "stray: topic id mismatch")
            log = self._log_manager.get_or_create_log(tp, config, topic.topic_id)
        partition = Partition(tp, topic.topic_id, log, self.node_id, self._replication)
        self.partitions[tp] = partition
        return partition

    def _drop_partition(self, tp: TopicPartition, reason: str) -> None:
        self.fetcher_manager.remove_fetcher_for_partitions((tp,))
        was_leader = self.partitions.pop(tp).is_leader
        self._complete_delayed(tp)
        self._log_manager.delete_log(tp, reason)
        if was_leader:
            self._leadership_changed(tp, None)

    def _leadership_changed(self, tp: TopicPartition, leader_epoch: int | None) -> None:
        for listener in self.leadership_listeners:
            listener(tp, leader_epoch)

    async def _remove_topic(self, name: str) -> None:
        doomed = [tp for tp in self.partitions if tp.topic == name]
        for tp in doomed:
            self._drop_partition(tp, "topic deleted")
        if doomed:
            log_event(
                _log, logging.INFO, "topic_replicas_deleted", topic=name, partitions=len(doomed)
            )

    def delete_stray_logs(self) -> int:
        """Once the metadata is loaded: delete local logs of partitions no topic assigns
        here (a topic deleted while this broker was down), as Kafka does."""
        stray = [tp for tp in self._log_manager.logs if tp not in self.partitions]
        for tp in stray:
            self._log_manager.delete_log(tp, "stray: not in the metadata")
        return len(stray)

    # -- produce -----------------------------------------------------------------------

    async def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytes | None],
        internal_topics_allowed: bool = False,
    ) -> dict[TopicPartition, ProduceResult]:
        """Append to the partitions this broker leads; only coordinators may write to
        internal topics (``internal_topics_allowed``), clients get INVALID_TOPIC_EXCEPTION.

        A coordinator's write is validated on the loop so that its appends land in the
        order they were issued (a tombstone must not overtake the commit before it);
        coordinator batches are small."""
        if required_acks not in (-1, 0, 1):
            error = InvalidRequiredAcksError(f"acks={required_acks} is not 0, 1 or -1")
            return {tp: ProduceResult(error) for tp in entries}
        results = {}
        appends: dict[TopicPartition, LeaderAppend] = {}
        for tp, records in entries.items():
            if tp.topic in INTERNAL_TOPICS and not internal_topics_allowed:
                results[tp] = ProduceResult(
                    InvalidTopicError(f"Cannot append to internal topic {tp.topic}")
                )
                continue
            appends[tp] = functools.partial(
                self._append_records_to, records or b"", in_order=internal_topics_allowed
            )
        results.update(await self.append_to_leaders(timeout_ms, required_acks, appends))
        return results

    async def _append_records_to(
        self,
        data: bytes,
        tp: TopicPartition,
        partition: Partition,
        now: int,
        required_acks: int,
        *,
        in_order: bool,
    ) -> LogAppendInfo:
        config = partition.log.config
        if in_order:
            validated = validate_records(data, config, now, topic_partition=tp)
        else:
            validated = await self._validate(data, config, now, tp)
        partition = self.get_partition_or_error(tp)  # it may have gone meanwhile
        return partition.append_records_to_leader(validated, required_acks, now)

    async def append_to_leaders(
        self, timeout_ms: int, required_acks: int, appends: Mapping[TopicPartition, LeaderAppend]
    ) -> dict[TopicPartition, ProduceResult]:
        """Run each partition's append as its leader (records, or a coordinator's
        control batch), then with acks=all wait until the ISR has them all."""
        results = {}
        statuses: dict[TopicPartition, ProducePartitionStatus] = {}
        for tp, append in appends.items():
            results[tp], status = await self._append_to_partition(tp, append, required_acks)
            if status is not None:
                statuses[tp] = status
        if statuses:
            await self._wait_for_replication(
                DelayedProduce(statuses, self.partitions.get), timeout_ms
            )
            for tp, status in statuses.items():
                if status.error is not None:
                    results[tp] = ProduceResult(status.error)
        return results

    async def _append_to_partition(
        self, tp: TopicPartition, append: LeaderAppend, required_acks: int
    ) -> tuple[ProduceResult, ProducePartitionStatus | None]:
        """The append's result and, for a successful acks=all append, what its wait
        watches."""
        try:
            partition = self.get_partition_or_error(tp)
            if not partition.is_leader:
                raise NotLeaderOrFollowerError(f"broker {self.node_id} does not lead {tp}")
            partition.check_min_isr(required_acks)
            info = await append(tp, partition, int(time.time() * 1000), required_acks)
            partition = self.get_partition_or_error(tp)
            status = (
                ProducePartitionStatus(partition, info.next_offset, partition.leader_epoch)
                if required_acks == -1
                else None
            )
            if partition.log.needs_flush:
                # flush.messages reached: as Kafka, fsync before acknowledging.
                await partition.log.flush()
        except Exception as e:
            return ProduceResult(as_kafka_error(e, f"produce to {tp}")), None
        self._complete_delayed(tp)
        return ProduceResult(info=info), status

    async def _validate(
        self, data: bytes, config: LogConfig, now: int, tp: TopicPartition
    ) -> ValidatedRecords:
        """On the loop when cheap; in the executor for a large compressed batch or one
        that expands past LOOP_DECOMPRESSION_BUDGET."""
        if not validation_is_costly(data, config):
            with contextlib.suppress(DecompressionBudgetExceeded):
                return validate_records(
                    data,
                    config,
                    now,
                    decompression_budget=LOOP_DECOMPRESSION_BUDGET,
                    topic_partition=tp,
                )
        validate = functools.partial(validate_records, topic_partition=tp)
        return await self._scheduler.run_blocking(validate, data, config, now)

    async def _wait_for_replication(self, delayed: DelayedProduce, timeout_ms: int) -> None:
        """acks=all: wait in the produce purgatory until every partition has settled;
        what is still pending then timed out."""
        await self.produce_purgatory.try_complete_else_watch(
            delayed.statuses, delayed.try_complete, timeout_ms / 1000
        )
        delayed.on_expiration(timeout_ms)

    # -- delete records ----------------------------------------------------------------

    async def delete_records(
        self, timeout_ms: int, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, DeleteRecordsPartitionStatus]:
        """Move the leaders' log start offsets, then wait until every live replica has
        followed or ``timeout_ms`` passes (Kafka's deleteRecords)."""
        status = {
            tp: delete_records_on_local_log(
                self.get_partition_or_error, tp, offset, INTERNAL_TOPICS
            )
            for tp, offset in offsets.items()
        }
        delayed = DelayedDeleteRecords(status, self.partitions.get)
        await self.delete_records_purgatory.try_complete_else_watch(
            status, delayed.try_complete, timeout_ms / 1000
        )
        delayed.on_expiration(timeout_ms)
        return status

    # -- list offsets ------------------------------------------------------------------

    async def fetch_offset_for_timestamp(
        self,
        tp: TopicPartition,
        timestamp: int,
        isolation_level: IsolationLevel | None,
        current_leader_epoch: int | None,
        fetch_only_from_leader: bool,
        version: int,
        remote_timeout_ms: int = DEFAULT_REMOTE_LIST_OFFSETS_TIMEOUT_MS,
    ) -> ListOffsetsResult:
        """One partition of a ListOffsets request, its errors as results (Kafka's
        ReplicaManager.fetchOffset): a lookup landing at or past what the asker may read
        finds nothing, or OFFSET_NOT_AVAILABLE while a new leader's HW lags its epoch
        (LEADER_NOT_AVAILABLE for versions before 5). A remote-tier lookup longer than
        ``remote_timeout_ms`` is REQUEST_TIMED_OUT (KIP-1075)."""
        try:
            if is_timestamp_unsupported(timestamp, version):
                raise UnsupportedVersionError(
                    f"timestamp {timestamp} is not supported by ListOffsets v{version}"
                )
            partition = self.get_partition_or_error(tp)
            holder = await partition.fetch_offset_for_timestamp(
                timestamp,
                isolation_level,
                current_leader_epoch,
                fetch_only_from_leader,
                self.remote_log_manager,
                remote_timeout_ms,
            )
            found = holder.found
            last = holder.last_fetchable_offset
            if found is None or (last is not None and found.offset >= last):
                if holder.offsets_error is not None:
                    raise holder.offsets_error
                found = None
            return ListOffsetsResult(found=found)
        except OffsetNotAvailableError as e:
            if version < OFFSET_NOT_AVAILABLE_MIN_VERSION:
                return ListOffsetsResult(LeaderNotAvailableError(str(e)))
            return ListOffsetsResult(e)
        except Exception as e:
            return ListOffsetsResult(as_kafka_error(e, f"list_offsets on {tp}"))

    # -- fetch -------------------------------------------------------------------------

    def _read(
        self,
        requests: list[FetchRequestPartition],
        max_bytes: int,
        isolation: FetchIsolation,
        replica_id: int = -1,
        update_fetch_state: bool = True,
    ) -> list[FetchResult]:
        return read_from_log(
            self.get_partition_or_error,
            requests,
            max_bytes,
            isolation,
            replica_id,
            update_fetch_state,
        )

    async def fetch_messages(
        self,
        requests: list[FetchRequestPartition],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation: FetchIsolation,
        replica_id: int = -1,
    ) -> list[FetchResult]:
        """Read now; if fewer than ``min_bytes`` are available and nothing failed, wait
        (long poll) until appends make enough available or ``max_wait_ms`` passes. A
        follower (``replica_id`` >= 0) reads to the log end and is also answered as soon
        as a high watermark moves, so that it learns the new one without delay."""
        results = self._read(requests, max_bytes, isolation, replica_id)
        if any(r.remote_fetch_info for r in results):  # Kafka: then it always waits for it
            remote = DelayedRemoteFetch(
                results,
                self.remote_log_manager,
                self.partitions,
                self.fetch_purgatory,
                self.remote_fetch_max_wait_ms,
            )
            return await remote.complete()
        available = sum(r.read.info.size for r in results if r.read is not None)
        if (
            max_wait_ms <= 0
            or available >= min_bytes
            or not requests
            or any(r.error is not None for r in results)
            or any(r.read is not None and r.read.diverging_epoch is not None for r in results)
        ):
            return results
        positions = {
            request.topic_partition: FetchPartitionStatus(
                r.read.info.fetch_offset_metadata,
                request.max_bytes,
                self.partitions[request.topic_partition].leader_epoch,
                r.read.high_watermark if replica_id >= 0 else -1,
            )
            for request, r in zip(requests, results, strict=True)
            if r.read is not None
        }

        def enough() -> bool:
            return bytes_available(self.partitions, positions, isolation) >= min_bytes

        # A follower's own fetch may just have moved the HW past the one it read.
        if replica_id < 0 or not enough():
            await self.fetch_purgatory.wait(positions, enough, max_wait_ms / 1000)
        return self._read(requests, max_bytes, isolation, replica_id, update_fetch_state=False)

    # -- shutdown ----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop replicating and answer every waiting request now with what it has."""
        self._closed = True
        if self._isr_expiration is not None:
            self._isr_expiration.cancel()
        for task in list(self._isr_writes):
            task.cancel()
        self.fetcher_manager.stop_all()
        self.fetch_purgatory.close()
        self.produce_purgatory.close()
        self.delete_records_purgatory.close()
