"""The requests the quorum controller's commands take and the results they give, as
frozen values: the fields of Kafka's request and response messages that the controller
uses (CreateTopics, CreatePartitions, AlterPartition, ElectLeaders,
AlterPartitionReassignments, BrokerHeartbeat, AssignReplicasToDirs), so the control
managers need no wire types and the handlers translate."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from tiercel.protocol.errors import KafkaError

__all__ = [
    "AlterPartitionData",
    "AlterPartitionResult",
    "BrokerHeartbeatReply",
    "BrokerHeartbeatRequest",
    "CreatableTopic",
    "CreatableTopicResult",
    "CreatePartitionsTopic",
    "DirectoryAssignment",
    "DirectoryAssignmentResult",
    "ElectionType",
    "OngoingReassignment",
    "TopicIdPartition",
]


@dataclass(frozen=True, slots=True, order=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    partition_id: int


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    """CreateTopics' CreatableTopic: -1 partitions or replication factor means the
    broker default; ``assignments`` (partition -> replicas) replaces both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreatableTopicResult:
    name: str
    topic_id: uuid.UUID | None
    error: KafkaError | None
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    """CreatePartitions' topic: the new total count, and optionally the replicas of
    each new partition."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class AlterPartitionData:
    """AlterPartition's PartitionData; ``new_isr`` as (broker id, broker epoch) pairs
    (v3's NewIsrWithEpochs; -1 when the leader's request did not say)."""

    partition_index: int
    leader_epoch: int
    new_isr: tuple[tuple[int, int], ...]
    partition_epoch: int
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    partition_index: int
    error: KafkaError | None
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    partition_epoch: int = -1


class ElectionType(enum.IntEnum):
    """ElectLeaders' ElectionType (Kafka's ``ElectionType``)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """ListPartitionReassignments' OngoingPartitionReassignment."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False
    # v1+: the broker's failed log directories (KIP-858)
    offline_log_dirs: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatReply:
    """BrokerHeartbeat's response fields (Kafka's ``BrokerHeartbeatReply``)."""

    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


@dataclass(frozen=True, slots=True)
class DirectoryAssignment:
    """AssignReplicasToDirs' DirectoryData: the partitions, by topic id, a broker placed
    in ``directory_id``."""

    directory_id: uuid.UUID
    topics: tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


# Per directory, per topic, each partition's error (None: assigned), in request order.
DirectoryAssignmentResult = list[
    tuple[uuid.UUID, list[tuple[uuid.UUID, list[tuple[int, KafkaError | None]]]]]
]
