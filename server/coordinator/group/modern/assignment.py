"""Assignments of a consumer group: partitions by topic id (Kafka's modern Assignment).

An `Assignment` maps a topic id to the frozenset of its partition indexes. Values built
here are never mutated afterwards: a member, a target assignment or an assignor result
holds its own dict, and a change builds a new one. Topics with no partition never
appear, so two assignments of the same partitions compare equal.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Final

from tiercel.server.coordinator.group.consumer_group_records import TopicPartitionsValue

Assignment = Mapping[uuid.UUID, frozenset[int]]

EMPTY_ASSIGNMENT: Final[Assignment] = {}


def assignment_of(pairs: Iterable[tuple[uuid.UUID, int]]) -> Assignment:
    """The assignment holding these (topic id, partition) pairs."""
    out: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in pairs:
        out.setdefault(topic_id, set()).add(partition)
    return {topic_id: frozenset(partitions) for topic_id, partitions in out.items()}


def normalized(assignment: Mapping[uuid.UUID, Iterable[int]]) -> Assignment:
    """A copy without empty topics and with frozenset values."""
    return {t: frozenset(p) for t, p in assignment.items() if p}


def pairs(assignment: Assignment) -> Iterable[tuple[uuid.UUID, int]]:
    for topic_id, partitions in assignment.items():
        for partition in partitions:
            yield topic_id, partition


def is_subset(owned: Assignment | None, target: Assignment) -> bool:
    """Every owned partition is in ``target``; an unknown owned set (None) is not."""
    if owned is None:
        return False
    return all(partitions <= target.get(t, frozenset()) for t, partitions in owned.items())


def to_values(assignment: Assignment) -> tuple[TopicPartitionsValue, ...]:
    """Record form, in a stable order (topics by id, partitions ascending)."""
    return tuple(
        TopicPartitionsValue(topic_id, tuple(sorted(assignment[topic_id])))
        for topic_id in sorted(assignment, key=lambda t: t.bytes)
    )


def from_values(values: Iterable[TopicPartitionsValue]) -> Assignment:
    return normalized({v.topic_id: v.partitions for v in values})
