"""The identity of one partition of a topic, used as a key throughout the broker."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

__all__ = ["TopicIdPartition", "TopicPartition"]


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A topic name and a partition number (Kafka's `TopicPartition`).

    Invariants: immutable and hashable; `str()` is Kafka's "<topic>-<partition>", which is also
    the name of the partition's directory in a log dir. Thread/loop contract: a value, safe
    anywhere.
    """

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition with its topic's id (Kafka's `TopicIdPartition`): what the remote tier
    keys by, so that a topic deleted and recreated under the same name never shares remote
    data with its predecessor."""

    topic_id: uuid.UUID
    topic_partition: TopicPartition

    def __str__(self) -> str:
        return f"{self.topic_partition}:{self.topic_id}"
