"""One remote segment as a snapshot holds it (Kafka's RemoteLogSegmentMetadataSnapshot):
the segment's metadata without its partition, which the snapshot file names once for
all of the partition's segments."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)

__all__ = ["RemoteLogSegmentMetadataSnapshot"]


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataSnapshot:
    """A value; any thread. Invariants as `RemoteLogSegmentMetadata`'s."""

    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int] = field(default_factory=dict)
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    txn_idx_empty: bool = False

    @classmethod
    def create(cls, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataSnapshot:
        return cls(
            metadata.remote_log_segment_id.id,
            metadata.start_offset,
            metadata.end_offset,
            metadata.max_timestamp_ms,
            metadata.broker_id,
            metadata.event_timestamp_ms,
            metadata.segment_size_in_bytes,
            dict(metadata.segment_leader_epochs),
            metadata.state,
            metadata.custom_metadata,
            metadata.txn_idx_empty,
        )

    def to_metadata(self, partition: TopicIdPartition) -> RemoteLogSegmentMetadata:
        """The segment's metadata, back in ``partition``; ValueError if it breaks the
        metadata's invariants."""
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId(partition.topic_id, partition.topic_partition, self.segment_id),
            self.start_offset,
            self.end_offset,
            self.max_timestamp_ms,
            self.broker_id,
            self.event_timestamp_ms,
            self.segment_size_in_bytes,
            self.segment_leader_epochs,
            self.state,
            self.custom_metadata,
            self.txn_idx_empty,
        )
