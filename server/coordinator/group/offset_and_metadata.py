"""OffsetAndMetadata: one committed offset, as the coordinator caches it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from tiercel.server.coordinator.group.coordinator_records import (
    NO_EXPIRE_TIMESTAMP,
    OffsetCommitValue,
)

NO_LEADER_EPOCH: Final = -1
NO_METADATA: Final = ""
# OffsetFetch's answer for a partition without a committed offset.
INVALID_OFFSET: Final = -1


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset with the client's metadata string and the commit's times.

    Invariants: ``metadata`` is never None (a null commit is stored as ""), as in Kafka;
    ``expire_timestamp_ms`` is set only by OffsetCommit v2-v4 with an explicit
    retention time; ``record_offset`` is where the commit's record sits in
    __consumer_offsets (-1 until written), which orders two commits of one partition
    whose writes complete out of order. Immutable; any thread.
    """

    committed_offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None
    record_offset: int = -1

    def to_value(self) -> OffsetCommitValue:
        expire = (
            NO_EXPIRE_TIMESTAMP if self.expire_timestamp_ms is None else self.expire_timestamp_ms
        )
        return OffsetCommitValue(
            self.committed_offset,
            self.leader_epoch,
            self.metadata,
            self.commit_timestamp_ms,
            expire,
        )

    @classmethod
    def from_value(cls, value: OffsetCommitValue, record_offset: int) -> OffsetAndMetadata:
        expire = None if value.expire_timestamp == NO_EXPIRE_TIMESTAMP else value.expire_timestamp
        return cls(
            value.offset,
            value.leader_epoch,
            value.metadata,
            value.commit_timestamp,
            expire,
            record_offset,
        )

    def at(self, record_offset: int) -> OffsetAndMetadata:
        return replace(self, record_offset=record_offset)
