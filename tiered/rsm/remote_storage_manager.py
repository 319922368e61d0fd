"""The RemoteStorageManager contract and the values it is called with (KIP-405).

Kafka's ``RemoteStorageManager`` copies a rolled segment and its auxiliary files to the
remote tier, serves byte ranges of it and its indexes, and deletes it. Its operations
are blocking: the RemoteLogManager calls them from its copier, reader and expiration
pools, never from the event loop. Copy and delete are idempotent: a retry after a crash
or a lost answer leaves the same objects.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tiercel.storage.topic_partition import TopicPartition

__all__ = [
    "IndexType",
    "LogSegmentData",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
]


class RemoteStorageError(Exception):
    """A remote operation failed (Kafka's RemoteStorageException); retriable."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """The object asked for is not in the remote tier (RemoteResourceNotFoundException)."""


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """One upload of one segment: the partition, with its topic id, and a random id, so
    that two uploads of the same offsets (after a leader change) never share objects."""

    topic_id: uuid.UUID
    topic_partition: TopicPartition
    id: uuid.UUID

    @classmethod
    def generate(cls, topic_id: uuid.UUID, topic_partition: TopicPartition) -> RemoteLogSegmentId:
        return cls(topic_id, topic_partition, uuid.uuid4())


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """What the remote tier knows of one segment (Kafka's RemoteLogSegmentMetadata).

    Invariants: ``start_offset <= end_offset``; ``segment_leader_epochs`` maps each leader
    epoch with records in the segment to its first offset there, in increasing order, the
    first at or below ``start_offset``."""

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.start_offset < 0 or self.end_offset < self.start_offset:
            raise ValueError(f"bad offsets [{self.start_offset}, {self.end_offset}]")
        if not self.segment_leader_epochs:
            raise ValueError("a segment has at least one leader epoch")


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """The files of a rolled segment to copy (Kafka's LogSegmentData): the log and its
    indexes by path, the transaction index and producer snapshot when there are any, and
    the leader-epoch checkpoint entries of the segment as bytes."""

    log_segment: str
    offset_index: str
    time_index: str
    transaction_index: str | None
    producer_snapshot_index: str | None
    leader_epoch_index: bytes


class IndexType(enum.Enum):
    """The auxiliary objects of a remote segment (Kafka's RemoteStorageManager.IndexType)."""

    OFFSET = "index"
    TIMESTAMP = "timeindex"
    TRANSACTION = "txnindex"
    PRODUCER_SNAPSHOT = "snapshot"
    LEADER_EPOCH = "leader-epoch-checkpoint"


class RemoteStorageManager(Protocol):
    """Kafka's RemoteStorageManager. Blocking; any thread; implementations are
    thread-safe. Errors are `RemoteStorageError`s."""

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        """Copy the segment and its auxiliary files; the segment's metadata object last,
        so that its presence means the copy is complete. Idempotent."""

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> bytes:
        """The segment's bytes from ``start_position`` to ``end_position`` inclusive (to
        its end when None), as Kafka's fetchLogSegment."""

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """One auxiliary object, whole; RemoteResourceNotFoundError if the segment has
        none of that type (no transaction index, say)."""

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete the segment's objects, its metadata object first, so that no reader
        ever finds metadata naming missing objects. Idempotent."""

    def close(self) -> None:
        """Release connections and pools."""
