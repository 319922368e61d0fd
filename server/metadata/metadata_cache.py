"""MetadataCache: this broker's in-memory view of the cluster, kept by the listener.

Event-loop only. Everything here is a copy of what the MetadataStore holds (brokers and
which of them are shutting down, topics with their ids, assignments, per-partition
leadership, and topic config overrides); `MetadataListener` keeps it current from
watches. Handlers answering Metadata, DescribeCluster or DescribeTopicPartitions read it
without touching the store.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from tiercel.server.metadata.zk_data import BrokerRegistration
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition

Condition = Callable[["MetadataCache"], bool]


@dataclass(slots=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    replicas: dict[int, tuple[int, ...]]
    states: dict[int, PartitionState] = field(default_factory=dict)
    config_overrides: dict[str, str] = field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        return len(self.replicas)

    def has_leaders(self) -> bool:
        return all(p in self.states and self.states[p].leader >= 0 for p in self.replicas)


class MetadataCache:
    def __init__(self, node_id: int, cluster_id: str) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.controller_id = -1
        self.brokers: dict[int, BrokerRegistration] = {}
        # Brokers in a controlled shutdown (their request belongs to their registration).
        self.shutting_down: frozenset[int] = frozenset()
        # Per partition, the brokers whose replica is on a failed log dir.
        self.offline_replicas: dict[TopicPartition, frozenset[int]] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        # Grows whenever a topic name appears (a created, or re-created, topic): consumer
        # groups re-resolve their regular-expression subscriptions when it moved.
        self.topic_names_version = 0
        self._changed = asyncio.Event()
        self._closed = False

    def close(self) -> None:
        """Shutdown: requests waiting for metadata answer now with what there is."""
        self._closed = True
        self._notify()

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._topic_names.get(topic_id)

    def partition_state(self, tp: TopicPartition) -> PartitionState | None:
        topic = self.topics.get(tp.topic)
        return None if topic is None else topic.states.get(tp.partition)

    def broker_endpoint(self, broker_id: int, listener_name: str) -> tuple[str, int] | None:
        """(host, port) of a live broker's listener (Kafka's
        MetadataCache.getAliveBrokerNode), None if the broker or listener is unknown."""
        broker = self.brokers.get(broker_id)
        endpoint = None if broker is None else broker.endpoint(listener_name)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def alive_broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def is_broker_isr_eligible(self, broker_id: int) -> bool:
        """Whether a replica on `broker_id` may join an ISR: its broker is registered
        and not shutting down (KIP-841: a broker leaving must not be waited for)."""
        return broker_id in self.brokers and broker_id not in self.shutting_down

    def put_topic(self, topic: TopicMetadata) -> None:
        old = self.topics.get(topic.name)
        if old is not None and old.topic_id != topic.topic_id:
            self._topic_names.pop(old.topic_id, None)
        if old is None or old.topic_id != topic.topic_id:
            self.topic_names_version += 1
        self.topics[topic.name] = topic
        self._topic_names[topic.topic_id] = topic.name
        self._notify()

    def remove_topic(self, name: str) -> TopicMetadata | None:
        topic = self.topics.pop(name, None)
        if topic is not None:
            self._topic_names.pop(topic.topic_id, None)
            self._notify()
        return topic

    def put_brokers(
        self, brokers: dict[int, BrokerRegistration], shutting_down: frozenset[int] = frozenset()
    ) -> None:
        self.brokers = brokers
        self.shutting_down = shutting_down.intersection(brokers)
        self._notify()

    def set_controller(self, controller_id: int) -> None:
        self.controller_id = controller_id
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_until(self, condition: Condition, timeout_s: float) -> bool:
        """Wait until ``condition(self)`` holds (re-checked on every change)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not condition(self):
            if self._closed:
                return False
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):  # keeps cancellation, unlike wait_for
                    await self._changed.wait()
            except TimeoutError:
                return condition(self)
        return True
