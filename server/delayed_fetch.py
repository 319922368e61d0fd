"""DelayedFetch: when a fetch waiting in the purgatory (a long poll) can be answered,
and what a fetch asks of each partition and gets back.

Event-loop only. Kafka's ``DelayedFetch``: each partition of the waiting fetch keeps the
position it read from (``FetchPartitionStatus``); the fetch completes once the bytes
available past those positions reach its min_bytes, or at once when something happened
that the fetcher must learn about (Kafka's tryComplete cases A-D, and for followers a
moved high watermark). Counting uses offsets and segment positions only, no reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from tiercel.protocol.errors import KafkaError
from tiercel.server.partition import LogReadResult, Partition
from tiercel.storage.log_values import FetchIsolation, LogOffsetMetadata
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.remote_log_reader import RemoteStorageFetchInfo

# What `bytes_available` answers when the fetch must be answered now.
_COMPLETE_NOW: Final = 2**31


@dataclass(frozen=True, slots=True)
class FetchRequestPartition:
    """One partition of a Fetch request (Kafka's FetchRequest.PartitionData)."""

    topic_partition: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int | None
    last_fetched_epoch: int = -1
    log_start_offset: int = -1
    """The follower's log start offset (replica fetches)."""


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A partition's read, or the error it failed with; ``remote_fetch_info`` when the
    read must go to the remote tier (its ``read`` is then empty, KIP-405)."""

    read: LogReadResult | None
    error: KafkaError | None = None
    remote_fetch_info: RemoteStorageFetchInfo | None = None


class FetchPartitionStatus(NamedTuple):
    """Where a delayed fetch waits on one partition: its read position and byte limit,
    the leader epoch it read in, and (followers only, else -1) the HW it was sent."""

    start: LogOffsetMetadata
    max_bytes: int
    leader_epoch: int
    high_watermark: int


def bytes_available(
    partitions: Mapping[TopicPartition, Partition],
    positions: Mapping[TopicPartition, FetchPartitionStatus],
    isolation: FetchIsolation,
) -> int:
    """What a delayed fetch would get now, as Kafka's DelayedFetch counts it; "a lot"
    when the fetch must be answered at once (partition gone or no longer led here,
    new leader epoch, log truncated below the fetch position, data on a later
    segment, a follower's high watermark moved)."""
    total = 0
    for tp, (start, max_bytes, leader_epoch, high_watermark) in positions.items():
        partition = partitions.get(tp)
        if partition is None or not partition.is_leader or partition.leader_epoch != leader_epoch:
            return _COMPLETE_NOW  # the read reports the error
        log = partition.log
        if high_watermark >= 0 and log.high_watermark != high_watermark:
            return _COMPLETE_NOW
        if isolation is FetchIsolation.LOG_END:
            end = log.log_end_offset_metadata
        elif isolation is FetchIsolation.HIGH_WATERMARK:
            end = log.high_watermark_metadata
        else:
            end = log.last_stable_offset_metadata
        if end.message_offset < start.message_offset:
            return _COMPLETE_NOW  # truncated under the fetcher: it must learn now
        if end.message_offset == start.message_offset:
            continue
        if end.on_same_segment(start) and start.relative_position_in_segment >= 0:
            total += min(end.position_diff(start), max_bytes)
        else:
            return _COMPLETE_NOW
    return total
