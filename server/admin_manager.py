"""AdminManager: topic creation, deletion, partition growth and config changes.

Event-loop only. Like Kafka's ZooKeeper-mode admin manager it validates a request and
writes the result into the MetadataStore (assignment and config overrides; a deletion
request node); the controller and every broker's metadata listener take it from there.
So these requests work on any broker, and the handlers wait until the local metadata
cache shows the outcome before answering.
"""

from __future__ import annotations

import contextlib
import random
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError
from tiercel.config.log_config_validator import validate_topic_configs
from tiercel.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    PolicyViolationError,
    ReassignmentInProgressError,
    TopicDeletionDisabledError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.metadata.store import (
    BadVersionError,
    CreateOp,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SetOp,
)
from tiercel.storage.checkpoint_file import random_kafka_uuid

MAX_TOPIC_NAME_LENGTH: Final = 249
# Conditional writes of a topic's node that lose to concurrent ones before giving up.
_MAX_TOPIC_WRITES: Final = 10
_LEGAL_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Kafka's rules for topic names (Topic.validate)."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f'Topic name cannot be "{name}"')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )


def assign_replicas(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    first_partition: int = 0,
    start_index: int | None = None,
) -> dict[int, tuple[int, ...]]:
    """Spread replicas over brokers as Kafka does without racks: leaders round-robin from
    a random start, followers at a shift that grows every time the leaders wrap around."""
    ordered = sorted(brokers)
    n = len(ordered)
    start = random.randrange(n) if start_index is None else start_index
    shift = random.randrange(n) if start_index is None else start_index
    result = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            replicas.append(ordered[(first + 1 + (shift + j) % (n - 1)) % n])
        result[partition] = tuple(replicas)
    return result


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    topic_id: uuid.UUID
    assignment: dict[int, tuple[int, ...]]
    overrides: dict[str, str]


class TopicCreator(Protocol):
    """Where a KRaft broker's own topic creations go: the active controller."""

    async def create_topic(self, name: str, planned: CreatedTopic) -> None: ...


class AdminManager:
    """With a MetadataStore it writes there; in KRaft mode it has a `TopicCreator`
    instead, for the broker's own creations (internal topics, Metadata's auto-creation),
    while the admin requests go to the controller (`forwarding_manager`) and never reach
    the write methods here."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore | None,
        cache: MetadataCache,
        topic_creator: TopicCreator | None = None,
    ) -> None:
        self._config = config
        self._metadata_store = store
        self._cache = cache
        self._topic_creator = topic_creator

    @property
    def _store(self) -> MetadataStore:
        if self._metadata_store is None:
            raise RuntimeError("a KRaft broker forwards admin requests to the controller")
        return self._metadata_store

    def plan_topic(self, topic: NewTopic, pending_partitions: int = 0) -> CreatedTopic:
        """Validate a topic creation and work out its assignment (raises Kafka errors).

        `pending_partitions` were created by the same request but are not in the
        metadata cache yet; they count towards max.partitions."""
        validate_topic_name(topic.name)
        if self._cache.topic(topic.name) is not None:
            raise TopicExistsError(f"Topic '{topic.name}' already exists.")
        self._check_collision(topic.name)
        overrides = self.validated_overrides(topic.configs)
        brokers = self._cache.alive_broker_ids()
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise InvalidRequestError(
                    "Both numPartitions or replicationFactor and replicasAssignments were set."
                )
            self._check_partition_limit(len(topic.assignments), pending_partitions)
            assignment = self._validated_assignment(topic.assignments, brokers, 0)
        else:
            partitions = (
                self._config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            )
            factor = (
                self._config.default_replication_factor
                if topic.replication_factor == -1
                else topic.replication_factor
            )
            if partitions <= 0:
                raise InvalidPartitionsError("Number of partitions must be larger than 0.")
            if factor <= 0:
                raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
            if factor > len(brokers):
                raise InvalidReplicationFactorError(
                    f"Replication factor: {factor} larger than available brokers: {len(brokers)}."
                )
            self._check_partition_limit(partitions, pending_partitions)
            assignment = assign_replicas(brokers, partitions, factor)
        return CreatedTopic(random_kafka_uuid(), assignment, overrides)

    async def create_topic(self, name: str, planned: CreatedTopic) -> None:
        """Write config then assignment in one transaction (Kafka writes the config
        first, so brokers never see the topic without its overrides); in KRaft mode,
        ask the controller."""
        if self._topic_creator is not None:
            await self._topic_creator.create_topic(name, planned)
            return
        try:
            await self._store.multi(
                [
                    CreateOp(zk.topic_config_path(name), zk.encode_topic_config(planned.overrides)),
                    CreateOp(
                        zk.topic_path(name),
                        zk.TopicAssignment(planned.topic_id, planned.assignment).encode(),
                    ),
                ]
            )
        except NodeExistsError as e:
            raise TopicExistsError(f"Topic '{name}' already exists.") from e

    def _check_partition_limit(self, adding: int, pending: int) -> None:
        """KIP-578's max.partitions, checked before any per-partition work so that an
        absurd count (2^31 - 1) is refused at once instead of exhausting memory."""
        limit = self._config.max_partitions
        existing = sum(t.partition_count for t in self._cache.topics.values()) + pending
        if existing + adding > limit:
            raise PolicyViolationError(
                f"Cannot add {adding} partitions: the cluster has {existing} and "
                f"max.partitions is {limit}."
            )

    def _check_collision(self, name: str) -> None:
        if "." not in name and "_" not in name:
            return
        normalized = name.replace(".", "_")
        for existing in self._cache.topics:
            if existing.replace(".", "_") == normalized:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {existing}")

    def _validated_assignment(
        self, assignments: Mapping[int, Sequence[int]], brokers: Sequence[int], first: int
    ) -> dict[int, tuple[int, ...]]:
        ids = sorted(assignments)
        if ids != list(range(first, first + len(ids))):
            raise InvalidReplicaAssignmentError(
                f"Partitions should be a consecutive 0-based integer sequence, got {ids}"
            )
        sizes = {len(replicas) for replicas in assignments.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise InvalidReplicaAssignmentError(
                "All partitions should have the same non-zero number of replicas"
            )
        result = {}
        for partition, replicas in assignments.items():
            if len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(
                    f"Duplicate brokers not allowed in replica assignment: {list(replicas)} "
                    f"for partition id {partition}."
                )
            unknown = set(replicas) - set(brokers)
            if unknown:
                raise InvalidReplicaAssignmentError(
                    f"Unknown broker(s) in replica assignment: {sorted(unknown)}."
                )
            result[partition] = tuple(replicas)
        return result

    async def delete_topic(self, name: str) -> uuid.UUID:
        """Request deletion; the controller removes the topic, brokers their replicas."""
        if not self._config.delete_topic_enable:
            raise TopicDeletionDisabledError("Topic deletion is disabled.")
        topic = self._cache.topic(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        with contextlib.suppress(NodeExistsError):  # already being deleted
            await self._store.create(zk.delete_topic_path(name))
        return topic.topic_id

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool = False,
        pending_partitions: int = 0,
    ) -> dict[int, tuple[int, ...]]:
        """CreatePartitions: grow the topic to `count` partitions and return its whole new
        assignment. Planned from the topic's node and written at the version read (the
        controller writes that node too, during reassignments), planned again if it moved.
        `pending_partitions` as for `plan_topic`."""
        for _ in range(_MAX_TOPIC_WRITES):
            topic_id, version, assignment = await self._plan_partitions(
                name, count, assignments, pending_partitions
            )
            if validate_only:
                return assignment
            try:
                await self._store.set(
                    zk.topic_path(name),
                    zk.TopicAssignment(topic_id, assignment).encode(),
                    expected_version=version,
                )
            except BadVersionError:
                continue
            except NoNodeError as e:
                raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.") from e
            return assignment
        raise InvalidPartitionsError(
            f"The partitions of '{name}' kept changing while this request was served; retry."
        )

    async def _plan_partitions(
        self, name: str, count: int, assignments: Sequence[Sequence[int]] | None, pending: int
    ) -> tuple[uuid.UUID, int, dict[int, tuple[int, ...]]]:
        """(topic id, node version, whole new assignment); raises Kafka's errors."""
        try:
            data, stat = await self._store.get(zk.topic_path(name))
        except NoNodeError as e:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.") from e
        if await self._store.exists(zk.delete_topic_path(name)) is not None:
            raise InvalidTopicError("The topic is queued for deletion.")
        stored = zk.TopicAssignment.decode(data)
        if stored.adding_replicas or stored.removing_replicas:
            # As Kafka: a reassignment rewrites the same node.
            raise ReassignmentInProgressError(
                f"A partition reassignment is in progress for the topic '{name}'."
            )
        current = len(stored.partitions)
        if count < current:
            raise InvalidPartitionsError(
                f"Topic currently has {current} partitions, which is higher than the requested "
                f"{count}."
            )
        if count == current:
            raise InvalidPartitionsError(f"Topic already has {current} partitions.")
        brokers = self._cache.alive_broker_ids()
        factor = len(stored.partitions.get(0, ())) or 1
        self._check_partition_limit(count - current, pending)
        if assignments is not None:
            if len(assignments) != count - current:
                raise InvalidReplicaAssignmentError(
                    f"Increasing the number of partitions by {count - current} but "
                    f"{len(assignments)} assignments provided."
                )
            new = self._validated_assignment(
                {current + i: list(r) for i, r in enumerate(assignments)}, brokers, current
            )
            if any(len(r) != factor for r in new.values()):
                raise InvalidReplicaAssignmentError(
                    f"Inconsistent replication factor between partitions, partition 0 has "
                    f"{factor} replicas"
                )
        else:
            if factor > len(brokers):
                raise InvalidReplicationFactorError(
                    f"Replication factor: {factor} larger than available brokers: {len(brokers)}."
                )
            new = assign_replicas(brokers, count - current, factor, first_partition=current)
        return stored.topic_id, stat.version, {**stored.partitions, **new}

    def validated_overrides(
        self, configs: Mapping[str, str | None], existing: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """A topic's whole new override map, checked with this broker's defaults against
        its `existing` overrides (none for a new topic) and made canonical; Kafka's
        LogConfig.validate, as its controller applies it to every topic config change."""
        try:
            return validate_topic_configs(self._config, configs, existing)
        except ConfigError as e:
            raise InvalidConfigError(e.message) from e

    async def set_topic_config(self, name: str, overrides: dict[str, str]) -> None:
        if self._cache.topic(name) is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        try:
            await self._store.multi(
                [SetOp(zk.topic_config_path(name), zk.encode_topic_config(overrides))]
            )
        except NoNodeError as e:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.") from e
