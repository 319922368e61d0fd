"""LeaderEndPoint: what a replica fetcher asks of the broker leading its partitions.

Kafka's ``LeaderEndPoint`` trait: Fetch with a replica id, OffsetForLeaderEpoch, and
ListOffsets for the leader's log start and end. `RemoteLeaderEndPoint` sends them over
the inter-broker listener; tests plug an in-process leader in behind the same methods.
Network and protocol failures raise; per-partition errors come back as error codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tiercel.protocol.errors import ErrorCode
from tiercel.server.replication.fetch_state import (
    EpochEndOffset,
    FetchPartition,
    FetchPartitionData,
)
from tiercel.storage.topic_partition import TopicPartition


class LeaderEndPoint(Protocol):
    """Event-loop only; one request at a time (the fetcher awaits each)."""

    @property
    def leader_id(self) -> int: ...

    async def fetch(
        self, partitions: Mapping[TopicPartition, FetchPartition]
    ) -> dict[TopicPartition, FetchPartitionData]:
        """One Fetch (replica id set, read to the log end); a partition missing from the
        answer is absent from the result."""
        ...

    async def fetch_epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochEndOffset]:
        """OffsetForLeaderEpoch for (current leader epoch, epoch) per partition."""
        ...

    async def fetch_earliest_offset(
        self, tp: TopicPartition, current_leader_epoch: int
    ) -> tuple[ErrorCode, int]:
        """The leader's log start offset (ListOffsets EARLIEST)."""
        ...

    async def fetch_earliest_local_offset(
        self, tp: TopicPartition, current_leader_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """The leader's local log start offset and its epoch (ListOffsets
        EARLIEST_LOCAL, KIP-405): where a follower told OFFSET_MOVED_TO_TIERED_STORAGE
        restarts."""
        ...

    async def fetch_latest_offset(
        self, tp: TopicPartition, current_leader_epoch: int
    ) -> tuple[ErrorCode, int]:
        """The leader's log end offset (ListOffsets LATEST, asked as a replica)."""
        ...

    def close(self) -> None: ...
