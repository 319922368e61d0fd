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
from dataclasses import dataclass, field, replace
from typing import Protocol

from tiercel.storage.checkpoint_file import random_kafka_uuid
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition

__all__ = [
    "IndexType",
    "LogSegmentData",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
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
        return cls(topic_id, topic_partition, random_kafka_uuid())

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.topic_partition)


class RemoteLogSegmentState(enum.IntEnum):
    """Where a remote segment is in its life (Kafka's RemoteLogSegmentState, with its wire
    ids). Only COPY_SEGMENT_FINISHED segments are served to readers."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    def is_valid_transition(self, target: RemoteLogSegmentState) -> bool:
        """Kafka's RemoteLogSegmentState.isValidTransition: forward along
        STARTED → FINISHED → DELETE_STARTED → DELETE_FINISHED, skipping FINISHED only
        from COPY_SEGMENT_STARTED (an abandoned copy is deleted); a self transition is
        valid, so retries and replays after a failover are harmless."""
        return target == self or target in _SEGMENT_TRANSITIONS[self]


_SEGMENT_TRANSITIONS: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: frozenset(
        {RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}
    ),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """What the remote tier knows of one segment (Kafka's RemoteLogSegmentMetadata).

    Invariants: ``start_offset <= end_offset``; ``segment_leader_epochs`` maps each leader
    epoch with records in the segment to its first offset there, in increasing order, the
    first at or below ``start_offset``. ``state`` and ``event_timestamp_ms`` change
    through `RemoteLogSegmentMetadataUpdate`s (`create_with_updates`); the rest never
    does. ``custom_metadata`` is what the RSM returned from the copy (KIP-917), opaque.
    ``txn_idx_empty`` (KIP-1058) says the segment has no aborted transactions, so a
    read_committed fetch need not fetch its transaction index; False when unknown (a
    record written before KIP-1058), which costs only that fetch."""

    remote_log_segment_id: RemoteLogSegmentId
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

    def __post_init__(self) -> None:
        if self.start_offset < 0 or self.end_offset < self.start_offset:
            raise ValueError(f"bad offsets [{self.start_offset}, {self.end_offset}]")
        if not self.segment_leader_epochs:
            raise ValueError("a segment has at least one leader epoch")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    def create_with_updates(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogSegmentMetadata:
        """This segment after ``update`` (Kafka's createWithUpdates); ValueError if the
        update is for another segment."""
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError(f"{update} is not an update of {self.remote_log_segment_id}")
        return replace(
            self,
            state=update.state,
            event_timestamp_ms=update.event_timestamp_ms,
            broker_id=update.broker_id,
            custom_metadata=(
                update.custom_metadata
                if update.custom_metadata is not None
                else self.custom_metadata
            ),
        )


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    """A state change of one remote segment (Kafka's RemoteLogSegmentMetadataUpdate)."""

    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    broker_id: int
    custom_metadata: bytes | None = None

    def __post_init__(self) -> None:
        if self.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            # Kafka: a segment starts life through addRemoteLogSegmentMetadata, never an update.
            raise ValueError("an update cannot take a segment to COPY_SEGMENT_STARTED")


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
