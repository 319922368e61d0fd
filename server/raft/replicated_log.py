"""The log the Raft client replicates (Kafka's ``ReplicatedLog``), with the two rules Kafka
writes as its default methods: validating a follower's fetch position against the log
and the oldest snapshot, and truncating to a diverging epoch's end offset.

`KafkaMetadataLog` implements it over Tiercel's `UnifiedLog`; the tests' `MockLog` in
memory. Event-loop only; `flush` and `close` await the executor.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Protocol

from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch, ValidOffsetAndEpoch
from tiercel.server.raft.raw_snapshot import RawSnapshotReader, RawSnapshotWriter
from tiercel.storage.log_values import LogOffsetMetadata
from tiercel.storage.topic_partition import TopicPartition

__all__ = [
    "Isolation",
    "LogAppendInfo",
    "LogFetchInfo",
    "ReplicatedLog",
    "truncate_to_end_offset",
    "validate_offset_and_epoch",
]

Buffer = bytes | bytearray | memoryview


class Isolation(enum.Enum):
    """How far a read goes: the high watermark (listeners) or the log end (followers)."""

    COMMITTED = "committed"
    UNCOMMITTED = "uncommitted"


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class LogFetchInfo:
    """Whole batches from the one holding the start offset, and where that batch begins
    (a read from inside a batch starts at the batch's base offset)."""

    records: Buffer
    start_offset_metadata: LogOffsetMetadata


class ReplicatedLog(Protocol):
    @property
    def topic_partition(self) -> TopicPartition: ...
    @property
    def topic_id(self) -> uuid.UUID: ...

    def append_as_leader(self, records: Buffer, epoch: int) -> LogAppendInfo:
        """Write batches the leader built (offsets from the log end, stamped ``epoch``)."""

    def append_as_follower(self, records: Buffer) -> LogAppendInfo:
        """Write batches fetched from the leader, offsets and epochs as they are."""

    def read(self, start_offset: int, isolation: Isolation) -> LogFetchInfo: ...

    @property
    def last_fetched_epoch(self) -> int:
        """The epoch of the last record, the snapshot's when the log is empty after one,
        0 (the primordial epoch) for an empty log."""

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= ``epoch`` and its end offset (Kafka's endOffsetForEpoch)."""

    @property
    def end_offset(self) -> LogOffsetMetadata: ...
    @property
    def high_watermark(self) -> LogOffsetMetadata: ...
    @property
    def start_offset(self) -> int: ...

    def initialize_leader_epoch(self, epoch: int) -> None:
        """A new leader's epoch starts at the log end offset."""

    def truncate_to(self, offset: int) -> None:
        """Remove everything from ``offset`` on; never below the high watermark."""

    def truncate_to_latest_snapshot(self) -> bool:
        """Empty the log at the latest snapshot when the snapshot is past its end."""

    def update_high_watermark(self, offset_metadata: LogOffsetMetadata) -> None: ...

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Move the log start to ``snapshot_id`` and drop what lies before it."""

    async def flush(self, force_flush_active_segment: bool) -> None:
        """Make every appended record durable."""

    def maybe_clean(self) -> bool:
        """Apply ``metadata.max.retention.bytes/ms`` to old snapshots and segments."""

    def create_new_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        """A writer for a snapshot of committed data (validated against the log); None if
        it exists or is below the log start."""

    def create_new_snapshot_unchecked(
        self, snapshot_id: OffsetAndEpoch
    ) -> RawSnapshotWriter | None:
        """A writer for a snapshot the leader sends; None if it exists already."""

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotReader | None: ...
    def latest_snapshot(self) -> RawSnapshotReader | None: ...
    def latest_snapshot_id(self) -> OffsetAndEpoch | None: ...
    def earliest_snapshot_id(self) -> OffsetAndEpoch | None: ...
    def on_snapshot_frozen(self, snapshot_id: OffsetAndEpoch) -> None: ...
    async def close(self) -> None: ...


def validate_offset_and_epoch(log: ReplicatedLog, offset: int, epoch: int) -> ValidOffsetAndEpoch:
    """Whether a follower at ``offset`` whose last record has ``epoch`` agrees with this
    log (Kafka's ReplicatedLog.validateOffsetAndEpoch): valid; diverging at the largest
    offset and epoch this log has below them; or below the oldest snapshot, to be
    served by the latest snapshot."""
    start = log.start_offset
    if start == 0 and offset == 0:
        return ValidOffsetAndEpoch.valid(OffsetAndEpoch(0, 0))
    earliest = log.earliest_snapshot_id()
    if earliest is not None and (
        offset < start or (offset == start and epoch != earliest.epoch) or epoch < earliest.epoch
    ):
        latest = log.latest_snapshot_id()
        if latest is None:
            raise RuntimeError(
                f"Log start offset ({start}) is greater than zero but latest snapshot was not found"
            )
        return ValidOffsetAndEpoch.snapshot(latest)
    end = log.end_offset_for_epoch(epoch)
    if end.epoch != epoch or end.offset < offset:
        return ValidOffsetAndEpoch.diverging(end)
    return ValidOffsetAndEpoch.valid(OffsetAndEpoch(offset, epoch))


def truncate_to_end_offset(log: ReplicatedLog, end_offset: OffsetAndEpoch) -> int:
    """Truncate to the leader's diverging epoch end: to that offset if this log has the
    epoch, else to the end of its own largest epoch below it (Kafka's
    truncateToEndOffset); the offset truncated to."""
    if end_offset.epoch == 0:
        truncation = min(end_offset.offset, log.end_offset.message_offset)
    else:
        local = log.end_offset_for_epoch(end_offset.epoch)
        if local.epoch == end_offset.epoch:
            truncation = min(local.offset, end_offset.offset)
        else:
            truncation = local.offset
    log.truncate_to(truncation)
    return truncation
