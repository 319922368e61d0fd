"""ControllerContext: what the active controller knows of the cluster between events.

Kafka's ControllerContext, minus leadership: partition states are always read from the
store right before they are changed (leaders change ISRs behind the controller's back),
so only the slowly changing facts are kept here — live brokers with their session (a
restarted broker comes back with a new one: Kafka's broker epoch), brokers shutting down,
and every topic's id, replica assignment and znode version.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

from tiercel.server.controller.replica_assignment import ReplicaAssignment
from tiercel.server.metadata import zk_data as zk
from tiercel.storage.topic_partition import TopicPartition


@dataclass(slots=True)
class TopicContext:
    """One topic as its znode last read or written by this controller said it."""

    topic_id: uuid.UUID
    partitions: dict[int, ReplicaAssignment]
    zk_version: int

    @classmethod
    def from_znode(cls, assignment: zk.TopicAssignment, zk_version: int) -> TopicContext:
        partitions = {
            p: ReplicaAssignment(
                replicas,
                assignment.adding_replicas.get(p, ()),
                assignment.removing_replicas.get(p, ()),
            )
            for p, replicas in assignment.partitions.items()
        }
        return cls(assignment.topic_id, partitions, zk_version)

    def to_znode(self) -> zk.TopicAssignment:
        parts = self.partitions.items()
        return zk.TopicAssignment(
            self.topic_id,
            {p: a.replicas for p, a in parts},
            {p: a.adding for p, a in parts if a.adding},
            {p: a.removing for p, a in parts if a.removing},
        )


@dataclass(frozen=True, slots=True)
class BrokerEpoch:
    """One incarnation of a broker: its registration's czxid (Kafka's broker epoch,
    greater for each new registration) and the ZooKeeper session that owns it."""

    epoch: int
    session: int


@dataclass(slots=True)
class ControllerContext:
    """Invariants: `shutting_down` ⊆ `live_brokers`; `being_reassigned` holds exactly
    the partitions whose assignment is being reassigned. Event-loop only."""

    live_brokers: dict[int, BrokerEpoch] = field(default_factory=dict)
    """Registered broker id → its current incarnation."""
    shutting_down: set[int] = field(default_factory=set)
    topics: dict[str, TopicContext] = field(default_factory=dict)
    being_reassigned: set[TopicPartition] = field(default_factory=set)
    new_partitions: set[TopicPartition] = field(default_factory=set)
    """Partitions without a state node yet: none of their replicas was live."""

    @property
    def live_broker_ids(self) -> frozenset[int]:
        """Brokers that may lead or join an ISR: registered and not shutting down."""
        return frozenset(self.live_brokers.keys() - self.shutting_down)

    @property
    def live_or_shutting_down_ids(self) -> frozenset[int]:
        return frozenset(self.live_brokers)

    def assignment(self, tp: TopicPartition) -> ReplicaAssignment | None:
        topic = self.topics.get(tp.topic)
        return None if topic is None else topic.partitions.get(tp.partition)

    def all_partitions(self) -> Iterator[tuple[TopicPartition, ReplicaAssignment]]:
        for name, topic in self.topics.items():
            for partition, assignment in topic.partitions.items():
                yield TopicPartition(name, partition), assignment

    def partitions_on(self, brokers: Collection[int]) -> dict[TopicPartition, tuple[int, ...]]:
        """Partitions with a replica on any of `brokers`, with their replicas."""
        return {
            tp: a.replicas
            for tp, a in self.all_partitions()
            if any(b in brokers for b in a.replicas)
        }

    def put_topic(self, name: str, topic: TopicContext) -> None:
        self.topics[name] = topic
        self.being_reassigned = {tp for tp in self.being_reassigned if tp.topic != name}
        for partition, assignment in topic.partitions.items():
            if assignment.is_being_reassigned:
                self.being_reassigned.add(TopicPartition(name, partition))

    def remove_topic(self, name: str) -> None:
        if self.topics.pop(name, None) is not None:
            self.being_reassigned = {tp for tp in self.being_reassigned if tp.topic != name}
            self.new_partitions = {tp for tp in self.new_partitions if tp.topic != name}

    def set_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.topics[tp.topic].partitions[tp.partition] = assignment
        if assignment.is_being_reassigned:
            self.being_reassigned.add(tp)
        else:
            self.being_reassigned.discard(tp)
