"""ReplicaManager: this broker's partitions, produce and fetch, and their delayed forms.

Event-loop only. It owns the partition map (seed 002's "partition pool"), turns Kafka
errors into per-partition results so that one bad partition never fails a request,
completes delayed fetches when appends make data available and delayed produces when the
high watermark covers them, and applies leadership from the metadata listener.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from config.broker_config import BrokerConfig
from config.log_config import LogConfig
from config.log_format import log_event
from protocol.errors import (
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from server.error_mapping import as_kafka_error
from server.metadata.metadata_cache import TopicMetadata
from server.partition import LogReadResult, Partition
from server.purgatory import Purgatory
from storage.log_manager import LogManager
from storage.log_validator import (
    DecompressionBudgetExceeded,
    ValidatedRecords,
    validate_records,
    validation_is_costly,
)
from storage.log_values import FetchIsolation, LogAppendInfo, LogOffsetMetadata
from storage.scheduler import Scheduler
from storage.topic_partition import TopicPartition

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
class FetchRequestPartition:
    topic_partition: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int | None
    last_fetched_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchResult:
    read: LogReadResult | None
    error: KafkaError | None = None


class ReplicaManager:
    def __init__(
        self,
        config: BrokerConfig,
        node_id: int,
        log_manager: LogManager,
        scheduler: Scheduler,
        log_config_for: LogConfigFor,
    ) -> None:
        self._config = config
        self.node_id = node_id
        self._log_manager = log_manager
        self._scheduler = scheduler
        self._log_config_for = log_config_for
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetch_purgatory = Purgatory("fetch")
        self.produce_purgatory = Purgatory("produce")
        self.leadership_listeners: list[LeadershipListener] = []

    # -- partitions --------------------------------------------------------------------

    def get_partition_or_error(self, tp: TopicPartition) -> Partition:
        partition = self.partitions.get(tp)
        if partition is None or partition.log.deleted:
            raise UnknownTopicOrPartitionError(f"this broker does not host {tp}")
        return partition

    async def on_topic(self, name: str, topic: TopicMetadata | None) -> None:
        """Apply a topic's metadata: create logs and take leadership for the partitions
        assigned here, update log configs, or delete the replicas of a deleted topic."""
        if topic is None:
            await self._remove_topic(name)
            return
        config = self._log_config_for(name)
        for partition_id, replicas in sorted(topic.replicas.items()):
            if self.node_id not in replicas:
                continue
            tp = TopicPartition(name, partition_id)
            partition = self.partitions.get(tp)
            if partition is not None and partition.topic_id != topic.topic_id:
                # The topic was deleted and recreated while this partition was ours.
                self._drop_partition(tp, "topic id changed")
                partition = None
            if partition is None:
                partition = self._create_partition(tp, topic, config)
            elif partition.log.config != config:
                partition.log.update_config(config)
            state = topic.states.get(partition_id)
            if state is not None and state.leader == self.node_id:
                if partition.make_leader(state):
                    self.fetch_purgatory.check_and_complete(tp)
                    self._leadership_changed(tp, state.leader_epoch)
            elif state is not None:
                was_leader = partition.is_leader
                partition.state = state
                self.fetch_purgatory.check_and_complete(tp)
                if was_leader:
                    self._leadership_changed(tp, None)

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
        partition = Partition(tp, topic.topic_id, log, self.node_id)
        self.partitions[tp] = partition
        return partition

    def _drop_partition(self, tp: TopicPartition, reason: str) -> None:
        was_leader = self.partitions.pop(tp).is_leader
        self.fetch_purgatory.check_and_complete(tp)
        self.produce_purgatory.check_and_complete(tp)
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
        internal topics (``internal_topics_allowed``), clients get INVALID_TOPIC_EXCEPTION."""
        if required_acks not in (-1, 0, 1):
            error = InvalidRequiredAcksError(f"acks={required_acks} is not 0, 1 or -1")
            return {tp: ProduceResult(error) for tp in entries}
        results = {}
        for tp, records in entries.items():
            if tp.topic in INTERNAL_TOPICS and not internal_topics_allowed:
                results[tp] = ProduceResult(
                    InvalidTopicError(f"Cannot append to internal topic {tp.topic}")
                )
                continue
            results[tp] = await self._append_to_partition(
                tp, records, required_acks, in_order=internal_topics_allowed
            )
        if required_acks == -1:
            await self._wait_for_replication(results, timeout_ms)
        return results

    async def _append_to_partition(
        self, tp: TopicPartition, records: bytes | None, required_acks: int, in_order: bool = False
    ) -> ProduceResult:
        """``in_order``: a coordinator's write, validated on the loop so that its appends
        land in the order they were issued (a tombstone must not overtake the commit
        before it); coordinator batches are small."""
        try:
            partition = self.get_partition_or_error(tp)
            if not partition.is_leader:
                raise NotLeaderOrFollowerError(f"broker {self.node_id} does not lead {tp}")
            partition.check_min_isr(required_acks)
            now = int(time.time() * 1000)
            data = records or b""
            if in_order:
                validated = validate_records(data, partition.log.config, now)
            else:
                validated = await self._validate(data, partition.log.config, now)
            partition = self.get_partition_or_error(tp)  # it may have gone meanwhile
            info = partition.append_records_to_leader(validated, required_acks, now)
            if partition.log.needs_flush:
                # flush.messages reached: as Kafka, fsync before acknowledging.
                await partition.log.flush()
        except Exception as e:
            return ProduceResult(as_kafka_error(e, f"produce to {tp}"))
        self.fetch_purgatory.check_and_complete(tp)
        self.produce_purgatory.check_and_complete(tp)
        return ProduceResult(info=info)

    async def _validate(self, data: bytes, config: LogConfig, now: int) -> ValidatedRecords:
        """On the loop when cheap; in the executor for a large compressed batch or one
        that expands past LOOP_DECOMPRESSION_BUDGET."""
        if not validation_is_costly(data, config):
            with contextlib.suppress(DecompressionBudgetExceeded):
                return validate_records(
                    data, config, now, decompression_budget=LOOP_DECOMPRESSION_BUDGET
                )
        return await self._scheduler.run_blocking(validate_records, data, config, now)

    async def _wait_for_replication(
        self, results: dict[TopicPartition, ProduceResult], timeout_ms: int
    ) -> None:
        """acks=all: wait until the high watermark covers every successful append."""
        pending = {tp: r.info.next_offset for tp, r in results.items() if r.info is not None}

        def done(tp: TopicPartition, needed: int) -> bool:
            # A partition gone meanwhile is done too: waiting longer cannot help it.
            partition = self.partitions.get(tp)
            return partition is None or partition.log.high_watermark >= needed

        def replicated() -> bool:
            return all(done(tp, needed) for tp, needed in pending.items())

        if pending and not replicated():
            await self.produce_purgatory.wait(pending, replicated, timeout_ms / 1000)
        for tp, needed in pending.items():
            if tp not in self.partitions:
                results[tp] = ProduceResult(
                    UnknownTopicOrPartitionError(f"{tp} was deleted before it was replicated")
                )
            elif not done(tp, needed):
                results[tp] = ProduceResult(
                    RequestTimedOutError(
                        f"{tp} was not replicated to the ISR within {timeout_ms} ms"
                    )
                )

    # -- fetch -------------------------------------------------------------------------

    def _read(
        self,
        requests: list[FetchRequestPartition],
        max_bytes: int,
        isolation: FetchIsolation,
    ) -> list[FetchResult]:
        """One pass over the partitions, Kafka's readFromLog: the response's byte budget
        is shared in order, and the first partition with data may exceed it by one batch."""
        limit = max_bytes
        min_one_message = True
        results = []
        for request in requests:
            try:
                partition = self.get_partition_or_error(request.topic_partition)
                read = partition.read_records(
                    request.fetch_offset,
                    min(request.max_bytes, limit),
                    isolation,
                    min_one_message,
                    request.current_leader_epoch,
                    request.last_fetched_epoch,
                )
            except Exception as e:
                results.append(
                    FetchResult(None, as_kafka_error(e, f"fetch from {request.topic_partition}"))
                )
                continue
            size = read.info.size
            if size:
                min_one_message = False
                limit = max(limit - size, 0)
            results.append(FetchResult(read))
        return results

    async def fetch_messages(
        self,
        requests: list[FetchRequestPartition],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation: FetchIsolation,
    ) -> list[FetchResult]:
        """Read now; if fewer than ``min_bytes`` are available and nothing failed, wait
        (long poll) until appends make enough available or ``max_wait_ms`` passes."""
        results = self._read(requests, max_bytes, isolation)
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
            request.topic_partition: (r.read.info.fetch_offset_metadata, request.max_bytes)
            for request, r in zip(requests, results, strict=True)
            if r.read is not None
        }

        def enough() -> bool:
            return self._bytes_available(positions, isolation) >= min_bytes

        await self.fetch_purgatory.wait(positions, enough, max_wait_ms / 1000)
        return self._read(requests, max_bytes, isolation)

    def _bytes_available(
        self,
        positions: dict[TopicPartition, tuple[LogOffsetMetadata, int]],
        isolation: FetchIsolation,
    ) -> int:
        """What a delayed fetch would get now, as Kafka's DelayedFetch counts it; "a lot"
        when the fetch must be answered at once (partition gone, log truncated below the
        fetch position, data on a later segment)."""
        now = 2**31
        total = 0
        for tp, (start, max_bytes) in positions.items():
            partition = self.partitions.get(tp)
            if partition is None:
                return now  # the read reports the error
            log = partition.log
            end = (
                log.log_end_offset_metadata
                if isolation is FetchIsolation.LOG_END
                else log.high_watermark_metadata
            )
            if end.message_offset < start.message_offset:
                return now  # truncated under the fetcher: it must learn now
            if end.message_offset == start.message_offset:
                continue
            if end.on_same_segment(start) and start.relative_position_in_segment >= 0:
                total += min(end.position_diff(start), max_bytes)
            else:
                return now
        return total

    # -- shutdown ----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Answer every waiting request now with what it has."""
        self.fetch_purgatory.close()
        self.produce_purgatory.close()
