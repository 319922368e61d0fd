"""What a metadata delta changes for the replicas one broker hosts (Kafka's
LocalReplicaChanges): the input ReplicaManager needs to make, keep or stop replicas.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from tiercel.server.metadata.image.partition_registration import PartitionRegistration
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition

__all__ = ["LocalReplicaChanges", "PartitionInfo"]


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition this broker now leads or follows, with its topic's id."""

    topic_id: uuid.UUID
    partition: PartitionRegistration


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """The changes of one delta for one broker:

    - ``deletes``: partitions it no longer hosts (removed from the replicas, or their
      topic deleted);
    - ``leaders``: partitions it leads whose partition epoch changed (new, or ISR or
      replicas changed), and among them ``elected_leaders``, those whose leader epoch
      changed: it has just become their leader;
    - ``followers``: partitions it follows whose partition epoch changed;
    - ``topic_ids``: the ids of the topics in leaders and followers, by name;
    - ``directory_ids``: its replica's log directory in every partition that is new or
      whose directory for it changed.

    A value; any thread.
    """

    deletes: frozenset[TopicPartition]
    elected_leaders: Mapping[TopicPartition, PartitionInfo]
    leaders: Mapping[TopicPartition, PartitionInfo]
    followers: Mapping[TopicPartition, PartitionInfo]
    topic_ids: Mapping[str, uuid.UUID]
    directory_ids: Mapping[TopicIdPartition, uuid.UUID]
