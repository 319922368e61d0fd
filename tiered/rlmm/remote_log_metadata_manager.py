"""The RemoteLogMetadataManager contract (Kafka's RemoteLogMetadataManager, KIP-405).

The RemoteLogManager records every remote segment's life here: a copy starts with
`add_remote_log_segment_metadata` (COPY_SEGMENT_STARTED) and ends with an update to
COPY_SEGMENT_FINISHED; deletion goes through DELETE_SEGMENT_STARTED and _FINISHED; a
deleted topic's partitions through the `RemotePartitionDeleteState`s. Readers (remote
fetch, ListOffsets, retention, a new leader choosing where to continue) query only
COPY_SEGMENT_FINISHED segments, by leader epoch and offset.

Writes are coroutines that complete once the change is durable (for the topic-based
manager: acknowledged by ``__remote_log_metadata`` and applied to this broker's view);
reads are synchronous lookups of the in-memory view. Event-loop only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)

__all__ = [
    "RemoteLogMetadataManager",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
]


class RemotePartitionDeleteState(enum.IntEnum):
    """Kafka's RemotePartitionDeleteState, with its wire ids: a deleted topic's partition
    is marked, its segments deleted, then the partition forgotten."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2

    def is_valid_transition(self, target: RemotePartitionDeleteState) -> bool:
        """Forward only, one step at a time; a self transition is a harmless retry."""
        return target in (self, RemotePartitionDeleteState(min(self + 1, 2)))


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    """Kafka's RemotePartitionDeleteMetadata."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


class RemoteLogMetadataManager(Protocol):
    """Kafka's RemoteLogMetadataManager. Event-loop only.

    Lookups raise `RemoteResourceNotFoundError` for a partition this broker does not
    follow (not a leader or follower here, or its metadata not loaded yet: see
    `is_ready`)."""

    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a copy starting; ``metadata.state`` is COPY_SEGMENT_STARTED."""

    async def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> None:
        """Move a segment along its states; `RemoteResourceNotFoundError` for an unknown
        segment, ValueError for a transition Kafka does not allow."""

    async def put_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> None:
        """Move a deleted partition along its states."""

    def remote_log_segment_metadata(
        self, partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` written in ``leader_epoch``
        (Kafka's remoteLogSegmentMetadata(tp, epochForOffset, offset)), if any."""

    def next_segment_with_txn_index(
        self, partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The first COPY_SEGMENT_FINISHED segment of ``leader_epoch`` at or after
        ``offset`` whose transaction index is not known empty (Kafka's
        nextSegmentWithTxnIndex, KIP-1058), if any."""

    def highest_offset_for_epoch(
        self, partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        """The highest offset of ``leader_epoch`` in the segments COPY_SEGMENT_FINISHED
        now (one being deleted no longer counts)."""

    def list_remote_log_segments(
        self, partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Every segment of the partition in any state, by start offset; with
        ``leader_epoch``, those holding records of that epoch."""

    def remote_log_size(self, partition: TopicIdPartition, leader_epoch: int) -> int:
        """Bytes of the COPY_SEGMENT_FINISHED segments with records of ``leader_epoch``."""

    def on_partition_leadership_changes(
        self, leaders: set[TopicIdPartition], followers: set[TopicIdPartition]
    ) -> None:
        """Start following the metadata of these partitions (this broker leads or
        follows them)."""

    def on_stop_partitions(self, partitions: set[TopicIdPartition]) -> None:
        """Stop following these partitions and drop their view."""

    def is_ready(self, partition: TopicIdPartition) -> bool:
        """Whether the view of ``partition`` is caught up enough to act on (Kafka's
        isReady): the RemoteLogManager neither copies nor deletes before it is."""

    async def close(self) -> None:
        """Stop following every partition."""
