"""acks=all across two partitions (Kafka's DelayedProduce): each partition's outcome is
latched the first time it settles, however its leadership moves before the other
partition of the request settles too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from replication_support import CONFIG, TOPIC_ID, batch, values

from tiercel.config.broker_config import BrokerConfig, Listener
from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.delayed_fetch import FetchRequestPartition
from tiercel.server.delayed_produce import DelayedProduce, ProducePartitionStatus
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.zk_data import BrokerRegistration
from tiercel.server.partition import PartitionState
from tiercel.server.replica_manager import ProduceResult, ReplicaManager
from tiercel.storage.log_manager import LogManager
from tiercel.storage.log_values import FetchIsolation
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
REPLICAS = (1, 2)


class PartitionStates:
    """The partition state nodes of topic t: compare-and-set on the partition epoch."""

    def __init__(self) -> None:
        self.states: dict[TopicPartition, PartitionState] = {}

    def put(self, tp: TopicPartition, state: PartitionState) -> None:
        current = self.states.get(tp)
        epoch = 0 if current is None else current.partition_epoch + 1
        self.states[tp] = replace(state, partition_epoch=epoch)

    async def submit(self, tp: TopicPartition, proposed: PartitionState) -> PartitionState | None:
        current = self.states.get(tp)
        if current is None or current.partition_epoch != proposed.partition_epoch:
            return current
        self.states[tp] = replace(proposed, partition_epoch=proposed.partition_epoch + 1)
        return self.states[tp]


class Broker:
    """Broker 1 over a real LogManager, replicas (1, 2) of t-0 (A) and t-1 (B); broker 2
    exists only as the follower fetches the tests make on its behalf."""

    def __init__(self, replica_manager: ReplicaManager, states: PartitionStates) -> None:
        self.rm = replica_manager
        self.states = states

    async def lead(self, tp: TopicPartition, leader: int, leader_epoch: int) -> None:
        self.states.put(tp, PartitionState(leader, leader_epoch, REPLICAS, REPLICAS))
        topic = TopicMetadata(
            "t",
            TOPIC_ID,
            {tp.partition: REPLICAS for tp in (A, B)},
            {tp.partition: state for tp, state in self.states.states.items()},
        )
        await self.rm.on_topic("t", topic)

    async def follower_fetch(self, tp: TopicPartition, offset: int) -> None:
        """Broker 2 fetches from ``offset``: it has everything before it."""
        epoch = self.rm.partitions[tp].leader_epoch
        request = FetchRequestPartition(tp, offset, 1 << 20, epoch, -1, 0)
        (result,) = await self.rm.fetch_messages(
            [request], 0, 1, 1 << 20, FetchIsolation.LOG_END, 2
        )
        assert result.error is None

    def high_watermark(self, tp: TopicPartition) -> int:
        return self.rm.partitions[tp].log.high_watermark


@pytest.fixture
async def broker(tmp_path: Path, scheduler: Scheduler) -> AsyncIterator[Broker]:
    config = BrokerConfig({"node.id": 1, "log.dirs": [str(tmp_path / "logs")]})
    log_manager = LogManager(config, scheduler, lambda topic: CONFIG)
    await log_manager.startup(None)
    cache = MetadataCache(1, "cluster")
    # Registered, but nobody listens there: a follower's fetcher keeps backing off.
    cache.put_brokers(
        {b: BrokerRegistration(b, (Listener("PLAINTEXT", "127.0.0.1", 1),)) for b in REPLICAS}
    )
    states = PartitionStates()
    rm = ReplicaManager(config, 1, log_manager, scheduler, lambda topic: CONFIG, cache, states)
    rm.startup()
    broker = Broker(rm, states)
    await broker.lead(A, 1, 0)
    await broker.lead(B, 1, 0)
    yield broker
    rm.shutdown()
    await rm.fetcher_manager.shutdown()
    await log_manager.shutdown()


async def produce_to_both(
    broker: Broker, timeout_ms: int
) -> asyncio.Task[dict[TopicPartition, ProduceResult]]:
    task = asyncio.create_task(
        broker.rm.append_records(timeout_ms, -1, {A: batch(values(3)), B: batch(values(3))})
    )
    await asyncio.sleep(0.05)
    assert not task.done()
    return task


async def move_away_and_back(broker: Broker, written_meanwhile: int) -> None:
    """A's leadership moves to broker 2 (epoch 1), which truncates broker 1's replica
    of A to 0 and brings it ``written_meanwhile`` records of its own, then back to
    broker 1 (epoch 2)."""
    await broker.lead(A, 2, 1)
    partition = broker.rm.partitions[A]
    partition.truncate_to(0)
    if written_meanwhile:
        records = [SimpleRecord(b"k", b"other") for _ in range(written_meanwhile)]
        partition.append_records_to_follower(build_record_batch(records, partition_leader_epoch=1))
    await broker.lead(A, 1, 2)


def error_name(result: ProduceResult) -> str | None:
    return None if result.error is None else result.error.error_code.name


async def test_a_settled_success_stays_success(broker: Broker) -> None:
    produce = await produce_to_both(broker, 2000)
    await broker.follower_fetch(A, 3)
    assert broker.high_watermark(A) == 3  # A is settled: the ISR has it
    await move_away_and_back(broker, written_meanwhile=0)
    assert broker.high_watermark(A) == 0
    await broker.follower_fetch(B, 3)
    results = await asyncio.wait_for(produce, 1)
    assert error_name(results[A]) is None and error_name(results[B]) is None
    info = results[A].info
    assert info is not None and (info.first_offset, info.last_offset) == (0, 2)


async def test_a_settled_error_stays_an_error(broker: Broker) -> None:
    produce = await produce_to_both(broker, 5000)
    # A loses leadership before the ISR has its append: NOT_LEADER_OR_FOLLOWER. Its
    # offsets 0..2 then hold broker 2's records, which the ISR gets as A comes back.
    await move_away_and_back(broker, written_meanwhile=3)
    await broker.follower_fetch(A, 3)
    assert broker.high_watermark(A) == 3
    await broker.follower_fetch(B, 3)
    results = await asyncio.wait_for(produce, 1)
    assert error_name(results[A]) == ErrorCode.not_leader_or_follower.name
    assert error_name(results[B]) is None


async def test_pending_partitions_time_out_and_settled_ones_keep_their_outcome(
    broker: Broker,
) -> None:
    produce = await produce_to_both(broker, 1500)
    await broker.follower_fetch(A, 3)
    results = await asyncio.wait_for(produce, 5)
    assert error_name(results[A]) is None
    assert error_name(results[B]) == ErrorCode.request_timed_out.name


async def test_a_new_leader_epoch_since_the_append_is_not_success(broker: Broker) -> None:
    """Leadership that moved away and back between the append and the wait (while the
    request's other appends awaited) is seen through the leader epoch."""
    (result,) = (await broker.rm.append_records(5000, 1, {A: batch(values(3))})).values()
    assert result.info is not None
    partition = broker.rm.partitions[A]
    required = result.info.next_offset
    await move_away_and_back(broker, written_meanwhile=3)
    await broker.follower_fetch(A, 3)
    assert broker.high_watermark(A) == required
    stale = ProducePartitionStatus(partition, required, leader_epoch=0)
    current = ProducePartitionStatus(partition, required, leader_epoch=2)
    assert DelayedProduce({A: stale}, broker.rm.partitions.get).try_complete()
    assert isinstance(stale.error, KafkaError)
    assert stale.error.error_code is ErrorCode.not_leader_or_follower
    assert DelayedProduce({A: current}, broker.rm.partitions.get).try_complete()
    assert current.error is None
