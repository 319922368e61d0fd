"""A partition's replicas on several "brokers" in one process, for the replication tests.

Each broker's replica is a real `Partition` over a real `UnifiedLog` in its own directory; the
partition state lives in `StateStore` (the conditional writes of the partition state
znode, in memory); a follower's `ReplicaFetcher` talks to the leader's `Partition`
through `InProcessLeader`, which answers as the leader's broker would (errors become
error codes). Nothing runs in the background: tests drive the fetchers round by round.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tiercel.config.log_config import LogConfig
from tiercel.protocol.errors import ErrorCode, KafkaError, NotLeaderOrFollowerError
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.delayed_fetch import FetchRequestPartition, FetchResult
from tiercel.server.metadata.metadata_cache import TopicMetadata
from tiercel.server.partition import Partition, PartitionState, ReplicationContext
from tiercel.server.read_from_log import read_from_log
from tiercel.server.replica_manager import ReplicaManager
from tiercel.server.replication.fetch_state import (
    EpochEndOffset,
    FetchPartition,
    FetchPartitionData,
    InitialFetchState,
)
from tiercel.server.replication.leader_end_point import LeaderEndPoint
from tiercel.server.replication.replica_fetcher import ReplicaFetcher
from tiercel.storage.log_loader import load_partition_dir
from tiercel.storage.log_validator import validate_records
from tiercel.storage.log_values import FetchIsolation, LogAppendInfo
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.unified_log import UnifiedLog

TP = TopicPartition("t", 0)
TOPIC_ID = uuid.UUID("8f5b6a4e-33c1-4a83-9d69-0c3d1f3f8a11")
BASE_TS = 1_700_000_000_000
LAG_MS = 10_000
CONFIG = LogConfig(file_delete_delay_ms=0, message_timestamp_after_max_ms=2**62)


class Clock:
    def __init__(self) -> None:
        self.now = BASE_TS

    def __call__(self) -> int:
        return self.now


class StateStore:
    """The partition state node: compare-and-set on its version (the partition epoch)."""

    def __init__(self) -> None:
        self.state: PartitionState | None = None
        self.writes: list[PartitionState] = []

    def put(self, state: PartitionState) -> PartitionState:
        """The controller's write: the next version."""
        version = -1 if self.state is None else self.state.partition_epoch
        self.state = replace(state, partition_epoch=version + 1)
        return self.state

    async def submit(self, tp: TopicPartition, proposed: PartitionState) -> PartitionState | None:
        await asyncio.sleep(0)  # a real store answers later
        current = self.state
        if current is None or current.partition_epoch != proposed.partition_epoch:
            return current
        self.state = replace(proposed, partition_epoch=proposed.partition_epoch + 1)
        self.writes.append(self.state)
        return self.state


def open_log(directory: Path, scheduler: Scheduler, config: LogConfig = CONFIG) -> UnifiedLog:
    """Open (or create) a partition directory as the LogManager does."""
    os.makedirs(directory, exist_ok=True)
    loaded = load_partition_dir(str(directory), config, 0, 0, True)
    return UnifiedLog(
        loaded.directory,
        loaded.topic_partition,
        config,
        loaded.segments,
        loaded.log_start_offset,
        loaded.recovery_point,
        loaded.leader_epoch_cache,
        scheduler,
        loaded.topic_id,
        loaded.producer_state,
    )


def log_bytes(log: UnifiedLog) -> bytes:
    """Every byte of the log's segments, in offset order."""
    return b"".join(os.pread(s.fd, s.size, 0) for s in log.segments)


def epochs(log: UnifiedLog) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries]


def batch(values: Sequence[bytes], timestamp: int = BASE_TS) -> bytes:
    return build_record_batch([SimpleRecord(b"k", v, timestamp=timestamp) for v in values])


def append(log: UnifiedLog, values: Sequence[bytes], epoch: int) -> LogAppendInfo:
    """Write a batch as the leader of ``epoch`` did (-1: a batch without an epoch, as
    written before leader epochs existed)."""
    return log.append_as_leader(
        validate_records(batch(values), log.config, BASE_TS), epoch, BASE_TS
    )


def values(n: int, tag: str = "v") -> list[bytes]:
    return [f"{tag}{i}".encode() for i in range(n)]


class Cluster:
    """Replicas of `TP` on brokers `ids`, one shared `ReplicationContext` (clock, store,
    live brokers, spawned ISR writes, partitions with delayed work)."""

    def __init__(
        self,
        root: Path,
        scheduler: Scheduler,
        ids: Sequence[int] = (1, 2),
        config: LogConfig = CONFIG,
    ) -> None:
        self.root = root
        self.scheduler = scheduler
        self.config = config
        self.clock = Clock()
        self.store = StateStore()
        self.live: set[int] = set(ids)
        self.delayed: list[TopicPartition] = []
        self.spawned: list[asyncio.Task[None]] = []
        self.context = ReplicationContext(
            replica_lag_time_max_ms=LAG_MS,
            alter_partition=self.store,
            is_replica_isr_eligible=lambda broker_id: broker_id in self.live,
            is_broker_alive=lambda broker_id: broker_id in self.live,
            on_delayed_work=self.delayed.append,
            spawn=self._spawn,
            clock_ms=self.clock,
        )
        self.replicas = {i: self._open(i) for i in ids}

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> object:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.spawned.append(task)
        return task

    async def close(self) -> None:
        """Finish the ISR writes and close every log (before the scheduler stops)."""
        await self.settle()
        for partition in self.replicas.values():
            await partition.log.close()

    async def settle(self) -> None:
        """Let the ISR writes in flight finish."""
        while self.spawned:
            await self.spawned.pop(0)

    def _open(self, broker_id: int) -> Partition:
        log = open_log(self.root / f"broker-{broker_id}" / str(TP), self.scheduler, self.config)
        return Partition(TP, TOPIC_ID, log, broker_id, self.context)

    def __getitem__(self, broker_id: int) -> Partition:
        return self.replicas[broker_id]

    async def restart(self, broker_id: int) -> Partition:
        """Close the replica's log and open it again (its HW as the checkpoint had it)."""
        old = self.replicas[broker_id]
        high_watermark = old.log.high_watermark
        await old.log.close()
        partition = self._open(broker_id)
        partition.log.update_high_watermark(high_watermark)
        self.replicas[broker_id] = partition
        return partition

    def elect(
        self,
        leader: int,
        leader_epoch: int,
        isr: Sequence[int] | None = None,
        replicas: Sequence[int] | None = None,
        members: Sequence[int] | None = None,
    ) -> PartitionState:
        """The controller's decision, applied by ``members`` (default: every replica)."""
        ids = tuple(self.replicas)
        state = self.store.put(
            PartitionState(
                leader,
                leader_epoch,
                tuple(isr) if isr is not None else ids,
                tuple(replicas) if replicas is not None else ids,
            )
        )
        for broker_id in members if members is not None else ids:
            partition = self.replicas[broker_id]
            if broker_id == leader:
                partition.make_leader(state)
            else:
                partition.make_follower(state)
        return state

    def produce(self, broker_id: int, values: Sequence[bytes], acks: int = 1) -> LogAppendInfo:
        partition = self.replicas[broker_id]
        now = self.clock()
        validated = validate_records(batch(values, now), partition.log.config, now)
        return partition.append_records_to_leader(validated, acks, now)

    def endpoint(self, follower: int) -> InProcessLeader:
        """What ``follower`` reaches its current leader through."""
        return InProcessLeader(self, self.replicas[follower].state.leader, follower)

    def fetcher(
        self, follower: int, endpoint: LeaderEndPoint | None = None, backoff_ms: int = 0
    ) -> ReplicaFetcher:
        """A fetcher for ``follower`` from its current leader, with the partition added
        as the replica manager adds it."""
        partition = self.replicas[follower]
        state = partition.state
        fetcher = ReplicaFetcher(
            endpoint or self.endpoint(follower),
            lambda tp: self.replicas[follower] if tp == TP else None,
            1024 * 1024,
            backoff_ms,
        )
        fetcher.add_partitions(
            {
                TP: InitialFetchState(
                    TOPIC_ID, state.leader, state.leader_epoch, partition.initial_fetch_offset()
                )
            }
        )
        return fetcher

    async def catch_up(self, fetcher: ReplicaFetcher, follower: int, rounds: int = 20) -> int:
        """Run rounds until the follower has the leader's log end and high watermark;
        returns the rounds it took."""
        leader = self.replicas[fetcher.leader_id]
        for n in range(1, rounds + 1):
            await fetcher.run_once()
            log = self.replicas[follower].log
            if (
                log.log_end_offset == leader.log.log_end_offset
                and log.high_watermark == leader.log.high_watermark
            ):
                return n
        raise AssertionError(f"broker {follower} did not catch up in {rounds} rounds")


# make_cluster(ids=(1, 2), root=tmp_path, config=CONFIG): the fixture's factory.
MakeCluster = Callable[..., Cluster]


class InProcessLeader:
    """`LeaderEndPoint` answered by the leader's `Partition`, as its broker would.

    ``fail_next`` makes the next request raise (a lost connection); ``requests`` records
    (api, partitions) of every request; a fetch that finds no data waits ``idle_wait_s``
    first (the leader's long poll)."""

    def __init__(self, cluster: Cluster, leader_id: int, replica_id: int) -> None:
        self._cluster = cluster
        self._leader_id = leader_id
        self._replica_id = replica_id
        self.fail_next: Exception | None = None
        self.idle_wait_s = 0.0
        self.requests: list[tuple[str, object]] = []
        self.closed = False

    @property
    def leader_id(self) -> int:
        return self._leader_id

    def _leader(self, api: str, payload: object) -> Partition:
        self.requests.append((api, payload))
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        return self._cluster[self._leader_id]

    async def fetch(
        self, partitions: Mapping[TopicPartition, FetchPartition]
    ) -> dict[TopicPartition, FetchPartitionData]:
        await asyncio.sleep(0)
        leader = self._leader("fetch", dict(partitions))
        result = {}
        for tp, p in partitions.items():
            request = FetchRequestPartition(
                tp,
                p.fetch_offset,
                p.max_bytes,
                p.current_leader_epoch,
                p.last_fetched_epoch,
                p.log_start_offset,
            )
            # The leader broker's own read (KIP-405's OFFSET_MOVED_TO_TIERED_STORAGE too).
            (answer,) = read_from_log(
                lambda _: leader, [request], 1 << 30, FetchIsolation.LOG_END, self._replica_id, True
            )
            if answer.error is not None or answer.read is None:
                error = answer.error.error_code if answer.error else ErrorCode.unknown_server_error
                result[tp] = FetchPartitionData(error)
                continue
            read = answer.read
            if not read.info.records:
                await asyncio.sleep(self.idle_wait_s)
            result[tp] = FetchPartitionData(
                ErrorCode.none,
                read.high_watermark,
                read.log_start_offset,
                bytes(read.info.records),
                read.diverging_epoch,
            )
        return result

    async def fetch_epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochEndOffset]:
        await asyncio.sleep(0)
        leader = self._leader("offset_for_leader_epoch", dict(partitions))
        result = {}
        for tp, (current_leader_epoch, epoch) in partitions.items():
            try:
                found = leader.last_offset_for_leader_epoch(current_leader_epoch, epoch)
            except KafkaError as e:
                result[tp] = EpochEndOffset(e.error_code)
                continue
            result[tp] = EpochEndOffset(ErrorCode.none, *found)
        return result

    async def _list_offset(
        self, api: str, tp: TopicPartition, current_leader_epoch: int
    ) -> tuple[ErrorCode, UnifiedLog | None]:
        await asyncio.sleep(0)
        leader = self._leader(api, tp)
        try:
            leader.check_epoch(current_leader_epoch)
            if not leader.is_leader:
                raise NotLeaderOrFollowerError()
        except KafkaError as e:
            return e.error_code, None
        return ErrorCode.none, leader.log

    async def fetch_earliest_offset(
        self, tp: TopicPartition, current_leader_epoch: int
    ) -> tuple[ErrorCode, int]:
        error, log = await self._list_offset("earliest", tp, current_leader_epoch)
        return error, -1 if log is None else log.log_start_offset

    async def fetch_earliest_local_offset(
        self, tp: TopicPartition, current_leader_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        error, log = await self._list_offset("earliest_local", tp, current_leader_epoch)
        if log is None:
            return error, -1, -1
        start = log.local_log_start_offset
        epoch = log.epoch_for_offset(start)
        return error, start, -1 if epoch is None else epoch

    async def fetch_latest_offset(
        self, tp: TopicPartition, current_leader_epoch: int
    ) -> tuple[ErrorCode, int]:
        error, log = await self._list_offset("latest", tp, current_leader_epoch)
        return error, -1 if log is None else log.log_end_offset

    def close(self) -> None:
        self.closed = True


class Broker:
    """Broker 1's ReplicaManager over a real LogManager; the partition state in `store`."""

    def __init__(self, replica_manager: ReplicaManager, store: StateStore) -> None:
        self.rm = replica_manager
        self.store = store

    async def apply(
        self, leader: int, leader_epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...]
    ) -> PartitionState:
        state = self.store.put(PartitionState(leader, leader_epoch, isr, replicas))
        await self.rm.on_topic("t", TopicMetadata("t", TOPIC_ID, {0: replicas}, {0: state}))
        return state

    async def follower_fetch(
        self, replica_id: int, offset: int, max_wait_ms: int = 0, epoch: int = 0, start: int = 0
    ) -> FetchResult:
        """A follower's fetch from ``offset``, its log starting at ``start``."""
        request = FetchRequestPartition(TP, offset, 1 << 20, epoch, -1, start)
        (result,) = await self.rm.fetch_messages(
            [request], max_wait_ms, 1, 1 << 20, FetchIsolation.LOG_END, replica_id
        )
        return result
