"""ReplicaFetcherManager: one fetcher per source broker, partitions moving between them,
idle fetchers stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from replication_support import TOPIC_ID

from tiercel.protocol.errors import ErrorCode
from tiercel.server.replication.failed_partitions import FailedPartitions
from tiercel.server.replication.fetch_state import (
    EpochEndOffset,
    FetchPartition,
    FetchPartitionData,
    InitialFetchState,
)
from tiercel.server.replication.replica_fetcher import ReplicaFetcher
from tiercel.server.replication.replica_fetcher_manager import ReplicaFetcherManager
from tiercel.storage.topic_partition import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class Unanswered:
    """A leader that never answers (a long poll that does not end)."""

    def __init__(self, leader_id: int) -> None:
        self.leader_id = leader_id
        self.closed = False

    async def fetch(
        self, partitions: Mapping[TopicPartition, FetchPartition]
    ) -> dict[TopicPartition, FetchPartitionData]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def fetch_epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochEndOffset]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def fetch_earliest_offset(self, tp: TopicPartition, epoch: int) -> tuple[ErrorCode, int]:
        raise AssertionError("unused")

    async def fetch_latest_offset(self, tp: TopicPartition, epoch: int) -> tuple[ErrorCode, int]:
        raise AssertionError("unused")

    def close(self) -> None:
        self.closed = True


def initial(leader: int, epoch: int) -> InitialFetchState:
    return InitialFetchState(TOPIC_ID, leader, epoch, 0)


async def test_partitions_follow_their_leaders_fetcher() -> None:
    endpoints: dict[int, Unanswered] = {}

    def make(leader_id: int, failed: FailedPartitions) -> ReplicaFetcher:
        endpoints[leader_id] = Unanswered(leader_id)
        return ReplicaFetcher(
            endpoints[leader_id], lambda tp: None, 1024, 10, failed_partitions=failed
        )

    manager = ReplicaFetcherManager(make)
    manager.add_fetcher_for_partitions({A0: initial(2, 0), A1: initial(2, 0), B0: initial(3, 0)})
    two, three = manager.fetcher(2), manager.fetcher(3)
    assert two is not None and three is not None
    assert (two.partition_count, three.partition_count) == (2, 1)

    # A new leader for a-0: it leaves broker 2's fetcher for broker 3's.
    manager.add_fetcher_for_partitions({A0: initial(3, 1)})
    assert manager.fetcher(2) is two and manager.fetcher(3) is three
    assert two.fetch_state(A0) is None
    state = three.fetch_state(A0)
    assert state is not None and state.current_leader_epoch == 1
    assert manager.fetch_state(A1) == (2, two.fetch_state(A1))

    # Broker 2's last partition moves too: its fetcher stops and closes its connection.
    manager.add_fetcher_for_partitions({A1: initial(3, 1)})
    assert manager.fetcher(2) is None and endpoints[2].closed
    manager.remove_fetcher_for_partitions([A0, A1])
    assert manager.fetcher(3) is three and three.partition_count == 1
    manager.remove_fetcher_for_partitions([B0])
    assert manager.fetcher(3) is None and endpoints[3].closed
    await manager.shutdown()
    assert manager.fetch_state(B0) is None
