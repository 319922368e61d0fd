"""The metadata records of topics and partitions (KIP-631; KIP-858 directories; KIP-966
eligible leader replicas), as Kafka 4.0's schemas declare them.

    2  TopicRecord              v0: Name string, TopicId uuid
    9  RemoveTopicRecord        v0: TopicId uuid
    3  PartitionRecord          v0-2: PartitionId int32 (-1), TopicId uuid,
                                Replicas []int32, Isr []int32, RemovingReplicas []int32,
                                AddingReplicas []int32, Leader int32 (-1),
                                LeaderRecoveryState int8 (tag 0), LeaderEpoch int32 (-1),
                                PartitionEpoch int32 (-1), Directories []uuid (v1+),
                                EligibleLeaderReplicas nullable []int32 (v2+, tag 1, null),
                                LastKnownElr nullable []int32 (v2+, tag 2, null)
    5  PartitionChangeRecord    v0-2: PartitionId int32 (-1), TopicId uuid, then only
                                tagged fields, each null (or -2, -1) when unchanged:
                                Isr (tag 0), Leader int32 (tag 1, -2), Replicas (tag 2),
                                RemovingReplicas (tag 3), AddingReplicas (tag 4),
                                LeaderRecoveryState int8 (tag 5, -1),
                                EligibleLeaderReplicas (v2+, tag 6), LastKnownElr (v2+,
                                tag 7), Directories nullable []uuid (v1+, tag 8)
    28 ClearElrRecord           v0: TopicName string (empty: every topic)

Defaults in parentheses; fields are listed in schema order, which is the order of the
untagged ones on the wire.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tiercel.protocol.metadata.field_types import (
    INT8,
    INT32,
    INT32_ARRAY,
    STRING,
    UUID,
    UUID_ARRAY,
    ZERO_UUID,
)
from tiercel.protocol.metadata.message_schema import MetadataRecord, metadata_record, schema_field

__all__ = [
    "ClearElrRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "RemoveTopicRecord",
    "TopicRecord",
]


@metadata_record(api_key=2, versions="0")
@dataclass(frozen=True, kw_only=True)
class TopicRecord(MetadataRecord):
    """A topic's creation: its name and id."""

    name: str = schema_field(STRING)
    topic_id: uuid.UUID = schema_field(UUID)


@metadata_record(api_key=9, versions="0")
@dataclass(frozen=True, kw_only=True)
class RemoveTopicRecord(MetadataRecord):
    """A topic's deletion, with its partitions and configs."""

    topic_id: uuid.UUID = schema_field(UUID)


@metadata_record(api_key=3, versions="0-2")
@dataclass(frozen=True, kw_only=True)
class PartitionRecord(MetadataRecord):
    """A partition's whole state (created, or in a snapshot). Replicas are in preferred
    order; Directories, when present, has the log directory of each replica in the same
    order."""

    partition_id: int = schema_field(INT32, default=-1)
    topic_id: uuid.UUID = schema_field(UUID)
    replicas: tuple[int, ...] = schema_field(INT32_ARRAY)
    isr: tuple[int, ...] = schema_field(INT32_ARRAY)
    removing_replicas: tuple[int, ...] = schema_field(INT32_ARRAY)
    adding_replicas: tuple[int, ...] = schema_field(INT32_ARRAY)
    leader: int = schema_field(INT32, default=-1)
    leader_recovery_state: int = schema_field(INT8, tag=0)
    leader_epoch: int = schema_field(INT32, default=-1)
    partition_epoch: int = schema_field(INT32, default=-1)
    directories: tuple[uuid.UUID, ...] = schema_field(UUID_ARRAY, "1+")
    eligible_leader_replicas: tuple[int, ...] | None = schema_field(
        INT32_ARRAY, "2+", nullable=True, tag=1, default=None
    )
    last_known_elr: tuple[int, ...] | None = schema_field(
        INT32_ARRAY, "2+", nullable=True, tag=2, default=None
    )


@metadata_record(api_key=5, versions="0-2")
@dataclass(frozen=True, kw_only=True)
class PartitionChangeRecord(MetadataRecord):
    """A change to a partition: each tagged field is left at its default (null, or -2
    for the leader, -1 for the recovery state) when it did not change."""

    partition_id: int = schema_field(INT32, default=-1)
    topic_id: uuid.UUID = schema_field(UUID, default=ZERO_UUID)
    isr: tuple[int, ...] | None = schema_field(INT32_ARRAY, nullable=True, tag=0, default=None)
    leader: int = schema_field(INT32, tag=1, default=-2)
    replicas: tuple[int, ...] | None = schema_field(INT32_ARRAY, nullable=True, tag=2, default=None)
    removing_replicas: tuple[int, ...] | None = schema_field(
        INT32_ARRAY, nullable=True, tag=3, default=None
    )
    adding_replicas: tuple[int, ...] | None = schema_field(
        INT32_ARRAY, nullable=True, tag=4, default=None
    )
    leader_recovery_state: int = schema_field(INT8, tag=5, default=-1)
    directories: tuple[uuid.UUID, ...] | None = schema_field(
        UUID_ARRAY, "1+", nullable=True, tag=8, default=None
    )
    eligible_leader_replicas: tuple[int, ...] | None = schema_field(
        INT32_ARRAY, "2+", nullable=True, tag=6, default=None
    )
    last_known_elr: tuple[int, ...] | None = schema_field(
        INT32_ARRAY, "2+", nullable=True, tag=7, default=None
    )


@metadata_record(api_key=28, versions="0")
@dataclass(frozen=True, kw_only=True)
class ClearElrRecord(MetadataRecord):
    """Clears the eligible leader replicas of one topic's partitions, or of every topic's
    when the name is empty (KIP-966; written when ELR is turned off or min.insync.replicas
    changes)."""

    topic_name: str = schema_field(STRING)
