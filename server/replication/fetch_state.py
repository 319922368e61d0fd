"""Values a replica fetcher keeps and exchanges (Kafka's AbstractFetcherThread types)."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from tiercel.protocol.errors import ErrorCode


class FetchPhase(enum.Enum):
    """Where a partition is in the follower's cycle: truncate first, then fetch (Kafka's
    fetcher ReplicaState, Truncating / Fetching)."""

    TRUNCATING = "truncating"
    FETCHING = "fetching"


@dataclass(frozen=True, slots=True)
class InitialFetchState:
    """How a partition joins a fetcher: its leader, epoch and first fetch offset."""

    topic_id: uuid.UUID
    leader_id: int
    current_leader_epoch: int
    init_offset: int


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    """One partition inside a fetcher.

    ``last_fetched_epoch`` is the epoch of the last batch in the local log (None when
    the log has no epochs); ``delayed_until`` (monotonic seconds) holds the partition
    back after an error, Kafka's replica.fetch.backoff.ms."""

    topic_id: uuid.UUID
    fetch_offset: int
    current_leader_epoch: int
    phase: FetchPhase
    last_fetched_epoch: int | None
    delayed_until: float = 0.0

    def is_ready(self, now: float) -> bool:
        return self.delayed_until <= now


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition of a Fetch request a follower sends."""

    topic_id: uuid.UUID
    partition: int
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchPartitionData:
    """The leader's answer for one partition of a follower's Fetch."""

    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview = b""
    diverging_epoch: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """The leader's answer to OffsetForLeaderEpoch for one partition (-1: undefined)."""

    error: ErrorCode
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class OffsetTruncationState:
    """Where to truncate, and whether that settles it (KIP-279 may need another round)."""

    offset: int
    truncation_completed: bool
