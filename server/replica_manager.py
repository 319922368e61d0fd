"""ReplicaManager: this broker's partitions, produce, fetch, ListOffsets, DeleteRecords.

Event-loop only. It owns the partition map (Kafka's allPartitions), turns Kafka errors
into per-partition results so that one bad partition never fails a request, completes
delayed operations (fetches when appends make data available or, for followers, the
high watermark moves; produces when the high watermark covers them; DeleteRecords when
the low watermark reaches them), and applies leadership from the metadata listener: a
partition this broker leads is served here, one it follows goes to the replica fetcher
of its leader (Kafka's ReplicaFetcherManager). Beside it: the ISR-expiration task
(`isr_expiration`), the ListOffsets error mapping (`fetch_offset`), the long poll
(`delayed_fetch`), the produce and DeleteRecords waits (`delayed_produce`,
`delayed_delete_records`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Final

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.log_config import LogConfig
from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import (
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from tiercel.protocol.list_offsets import (
    IsolationLevel,
)
from tiercel.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from tiercel.server.delayed_delete_records import (
    DelayedDeleteRecords,
    DeleteRecordsPartitionStatus,
    delete_records_on_local_log,
)
from tiercel.server.delayed_fetch import (
    DelayedFetch,
    FetchRequestPartition,
    FetchResult,
    respond_now,
)
from tiercel.server.delayed_produce import DelayedProduce, ProducePartitionStatus
from tiercel.server.delayed_remote_fetch import (
    DEFAULT_REMOTE_FETCH_MAX_WAIT_MS,
    DelayedRemoteFetch,
)
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.fetch_offset import ListOffsetsResult, fetch_offset
from tiercel.server.isr_expiration import IsrExpiration
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
)
from tiercel.storage.producer_append_info import AppendOrigin
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.storage.verification_guard import SENTINEL, VerificationGuard

_log: Final = logging.getLogger("tiercel.replica_manager")

LogConfigFor = Callable[[str], LogConfig]
# Told (partition, leader epoch) when this broker becomes or stays leader with a new
# state, (partition, None) when it stops leading it; the group coordinator follows the
# leadership of __consumer_offsets this way (Kafka's onLeadershipChange callback).
LeadershipListener = Callable[[TopicPartition, int | None], None]
# Told (partition, the directory id of the log dir holding this broker's log of it,
# why) when the metadata places it elsewhere: Kafka's DirectoryEventHandler
# handleAssignment, which a KRaft broker points at its AssignmentsManager (KIP-858).
AssignmentHandler = Callable[[TopicIdPartition, uuid.UUID, str], None]
# Kafka's Topic.isInternal: clients cannot produce to these, only coordinators.
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})
# Decompressing this much to validate a batch is fine on the event loop (about a
# millisecond); a batch that expands further is validated in the executor.
LOOP_DECOMPRESSION_BUDGET: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error: KafkaError | None = None
    info: LogAppendInfo | None = None


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
        # Its ISR writes retry until the store answers: shutdown cancels them.
        self._isr_expiration = IsrExpiration(
            scheduler, self.partitions, config.replica_lag_time_max_ms
        )
        self._replication = ReplicationContext(
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            alter_partition=alter_partition,
            # Kafka's ZooKeeper-mode rule: a broker may join an ISR while it is registered.
            is_replica_isr_eligible=metadata_cache.is_broker_isr_eligible,
            is_broker_alive=lambda broker_id: broker_id in metadata_cache.brokers,
            on_delayed_work=self._complete_delayed,
            spawn=self._isr_expiration.spawn_isr_write,
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
        self._closed = False
        # The broker's RemoteLogManager, once tiering is on (KIP-405): remote reads.
        self.remote_log_manager: RemoteLogReads | None = None
        self.remote_fetch_max_wait_ms = DEFAULT_REMOTE_FETCH_MAX_WAIT_MS
        # Asks transaction coordinators to verify first transactional writes (KIP-890);
        # set by the broker once its transaction coordinator exists.
        self.add_partitions_to_txn_manager: AddPartitionsToTxnManager | None = None
        # A KRaft broker's log dirs by directory.id (meta.properties) and where their
        # replicas' placements go (KIP-858); set by the broker of a KRaft node.
        self.directory_ids: Mapping[str, uuid.UUID] = {}
        self.directory_event_handler: AssignmentHandler | None = None

    @property
    def closed(self) -> bool:
        """Shut down: metadata must no longer start fetchers or change logs."""
        return self._closed

    def startup(self) -> None:
        """Start the ISR-expiration task (`IsrExpiration`)."""
        self._isr_expiration.startup()

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
            if partition.log.config != config:
                # Also a log loaded at start-up, before its topic's config was known: a
                # KRaft broker loads its logs before it replays the metadata log (Kafka
                # orders it the other way: BrokerMetadataPublisher.initializeManagers
                # starts the LogManager with the first image's topic configs).
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
        if not changed and tp in self.fetcher_manager.failed_partitions:
            # Kafka's applyLocalFollowersDelta restarts a fetcher only for a new leader
            # epoch: a partition marked failed stays out until then (or a restart).
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

    def maybe_update_topic_assignments(
        self, assigned: Mapping[TopicIdPartition, uuid.UUID]
    ) -> None:
        """For each partition whose directory a metadata delta set (a new replica) or
        changed: if this broker's log of it is in another log dir — UNASSIGNED, as the
        controller places a new replica on a broker with several dirs, included — tell
        the controller where it is (Kafka's ReplicaManager.applyDelta, with
        maybeUpdateTopicAssignment)."""
        handler = self.directory_event_handler
        if handler is None:
            return
        for partition, directory_id in assigned.items():
            log = self._log_manager.get_log(partition.topic_partition)
            if log is None:
                continue  # not hosted here, or its dir failed
            actual = self.directory_ids.get(log.parent_dir)
            if actual is not None and actual != directory_id:
                handler(partition, actual, "Applying metadata delta")

    def delete_stray_logs(self) -> int:
        """Once the metadata is loaded: delete local logs of partitions no topic assigns
        here (a topic deleted while this broker was down), as Kafka does."""
        stray = [tp for tp in self._log_manager.logs if tp not in self.partitions]
        for tp in stray:
            self._log_manager.delete_log(tp, "stray: not in the metadata")
        return len(stray)

    # -- produce -----------------------------------------------------------------------

    @property
    def transaction_verifier(self) -> AddPartitionsToTxnManager | None:
        """Who verifies first transactional writes; None when
        transaction.partition.verification.enable is off (or no coordinator is wired)."""
        if not self._config.transaction_partition_verification_enable:
            return None
        return self.add_partitions_to_txn_manager

    async def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytes | None],
        internal_topics_allowed: bool = False,
        verification_guards: Mapping[TopicPartition, VerificationGuard] | None = None,
    ) -> dict[TopicPartition, ProduceResult]:
        """Append to the partitions this broker leads; only coordinators may write to
        internal topics (``internal_topics_allowed``), clients get INVALID_TOPIC_EXCEPTION.
        A coordinator's appends are AppendOrigin.COORDINATOR (Kafka's coordinators pass
        both). A transaction's first write to a partition presents the guard of its
        verification (``verification_guards``).

        A coordinator's write is validated on the loop so that its appends land in the
        order they were issued (a tombstone must not overtake the commit before it);
        coordinator batches are small."""
        if required_acks not in (-1, 0, 1):
            error = InvalidRequiredAcksError(f"acks={required_acks} is not 0, 1 or -1")
            return {tp: ProduceResult(error) for tp in entries}
        results = {}
        appends: dict[TopicPartition, LeaderAppend] = {}
        origin = AppendOrigin.COORDINATOR if internal_topics_allowed else AppendOrigin.CLIENT
        for tp, records in entries.items():
            if tp.topic in INTERNAL_TOPICS and not internal_topics_allowed:
                results[tp] = ProduceResult(
                    InvalidTopicError(f"Cannot append to internal topic {tp.topic}")
                )
                continue
            appends[tp] = functools.partial(
                self._append_records_to,
                records or b"",
                origin=origin,
                verification_guard=(verification_guards or {}).get(tp, SENTINEL),
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
        origin: AppendOrigin,
        verification_guard: VerificationGuard,
    ) -> LogAppendInfo:
        config = partition.log.config
        if origin is AppendOrigin.COORDINATOR:  # in order: see append_records
            validated = validate_records(data, config, now, topic_partition=tp)
        else:
            validated = await self._validate(data, config, now, tp)
        partition = self.get_partition_or_error(tp)  # it may have gone meanwhile
        return partition.append_records_to_leader(
            validated, required_acks, now, verification_guard, origin
        )

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
        ReplicaManager.fetchOffset, `fetch_offset`)."""
        return await fetch_offset(
            self.get_partition_or_error,
            tp,
            timestamp,
            isolation_level,
            current_leader_epoch,
            fetch_only_from_leader,
            version,
            self.remote_log_manager,
            remote_timeout_ms,
        )

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
        if respond_now(requests, results, max_wait_ms, min_bytes):
            return results
        delayed = DelayedFetch(requests, results, self.partitions, isolation, min_bytes, replica_id)
        # A follower's own fetch may just have moved the HW past the one it read.
        if replica_id < 0 or not delayed.try_complete():
            await self.fetch_purgatory.wait(
                delayed.positions, delayed.try_complete, max_wait_ms / 1000
            )
        return self._read(requests, max_bytes, isolation, replica_id, update_fetch_state=False)

    # -- shutdown ----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop replicating and answer every waiting request now with what it has."""
        self._closed = True
        self._isr_expiration.shutdown()
        self.fetcher_manager.stop_all()
        self.fetch_purgatory.close()
        self.produce_purgatory.close()
        self.delete_records_purgatory.close()
