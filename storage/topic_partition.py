"""The identity of one partition of a topic, used as a key throughout the broker."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TopicPartition"]


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
