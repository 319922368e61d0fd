"""CreateTopics, CreatePartitions and DeleteTopics on the controller (the topic half of
Kafka's ``ReplicationControlManager``: ``createTopics``, ``createPartitions``,
``deleteTopics``).

A new partition's ISR is its active replicas and its leader the first of them, at leader
and partition epoch 0 (Kafka's ``createTopic``); placement is `StripedReplicaPlacer`'s
unless the request assigns replicas. A topic's records are its TopicRecord, its
ConfigRecords, then its PartitionRecords, one atomic batch per request. Deleting a topic
is one RemoveTopicRecord; its partitions and configs go when that is replayed.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tiercel.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    PolicyViolationError,
    TopicDeletionDisabledError,
    TopicExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.topic_records import RemoveTopicRecord, TopicRecord
from tiercel.server.admin_manager import validate_topic_name
from tiercel.server.controller.configuration_control_manager import (
    ConfigResource,
    ConfigResourceType,
    OpType,
)
from tiercel.server.controller.controller_requests import (
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsTopic,
)
from tiercel.server.controller.controller_result import ControllerResult
from tiercel.server.controller.replication_control_manager import ReplicationControlManager
from tiercel.server.controller.striped_replica_placer import StripedReplicaPlacer, UsableBroker
from tiercel.server.metadata.image.image_writer import ImageWriterOptions
from tiercel.server.metadata.image.partition_registration import (
    NO_LEADER,
    LeaderRecoveryState,
    PartitionRegistration,
)

__all__ = ["TopicCommands", "TopicDefaults"]


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """``num.partitions``, ``default.replication.factor``, ``delete.topic.enable`` and
    ``max.partitions`` (KIP-578)."""

    num_partitions: int = 1
    replication_factor: int = 1
    delete_topic_enable: bool = True
    max_partitions: int = 10000


class TopicCommands:
    """Event-loop only; pure but for the random source of topic ids and placement."""

    def __init__(
        self, replication: ReplicationControlManager, defaults: TopicDefaults, rng: random.Random
    ) -> None:
        self._replication = replication
        self._defaults = defaults
        self._rng = rng
        self._placer = StripedReplicaPlacer(rng)

    def create_topics(
        self, topics: Sequence[CreatableTopic], validate_only: bool
    ) -> ControllerResult[list[CreatableTopicResult]]:
        """Kafka's ``createTopics``: each topic succeeds or fails on its own."""
        records: list[ApiMessageAndVersion] = []
        results = []
        names = [t.name for t in topics]
        created: set[str] = set()
        pending = 0
        for topic in topics:
            try:
                if names.count(topic.name) > 1:
                    raise InvalidRequestError("Duplicate topic name.")
                self._check_new_name(topic.name, created)
                topic_records, result = self._create_topic(topic, pending)
            except KafkaError as e:
                results.append(CreatableTopicResult(topic.name, None, e))
                continue
            created.add(topic.name)
            pending += result.num_partitions
            records += topic_records
            results.append(result)
        return ControllerResult([] if validate_only else records, results)

    def _check_new_name(self, name: str, created: set[str]) -> None:
        validate_topic_name(name)
        if name in self._replication.topics_by_name or name in created:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        normalized = name.replace(".", "_")
        for existing in (*self._replication.topics_by_name, *created):
            if existing.replace(".", "_") == normalized:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {existing}")

    def _check_partition_limit(self, adding: int, pending: int) -> None:
        """KIP-578's max.partitions over the whole cluster, checked before any placement,
        so that an absurd count (2^31 - 1) is refused at once; Kafka's controller bounds
        an operation to 10000 records (QuorumController's MAX_RECORDS_PER_USER_OP)."""
        limit = self._defaults.max_partitions
        existing = sum(len(t.parts) for t in self._replication.topics.values()) + pending
        if existing + adding > limit:
            raise PolicyViolationError(
                f"Cannot add {adding} partitions: the cluster has {existing} and "
                f"max.partitions is {limit}."
            )

    def _create_topic(
        self, topic: CreatableTopic, pending: int
    ) -> tuple[list[ApiMessageAndVersion], CreatableTopicResult]:
        if topic.assignments:
            if topic.num_partitions != -1:
                raise InvalidRequestError(
                    "A manual partition assignment was specified, but numPartitions was not "
                    "set to -1."
                )
            if topic.replication_factor != -1:
                raise InvalidRequestError(
                    "A manual partition assignment was specified, but replicationFactor was "
                    "not set to -1."
                )
            self._check_partition_limit(len(topic.assignments), pending)
            placements = self._manual_placements(topic.assignments)
        else:
            placements = self._placements(topic.num_partitions, topic.replication_factor, pending)
        topic_id = _random_topic_id(self._rng)
        configs = self._replication.configuration_control.incremental_alter_configs(
            {
                ConfigResource(ConfigResourceType.TOPIC, topic.name): {
                    k: (OpType.SET, v) for k, v in topic.configs.items()
                }
            },
            newly_created=True,
        )
        config_error = next(iter(configs.response.values()))
        if config_error is not None:
            raise config_error
        options = ImageWriterOptions(self._replication.feature_control.metadata_version)
        records = [ApiMessageAndVersion(TopicRecord(name=topic.name, topic_id=topic_id), 0)]
        records += configs.records
        for partition_id, replicas in enumerate(placements):
            records.append(self._new_partition(replicas).to_record(topic_id, partition_id, options))
        result = CreatableTopicResult(
            topic.name, topic_id, None, len(placements), len(placements[0])
        )
        return records, result

    def _placements(
        self, num_partitions: int, replication_factor: int, pending: int
    ) -> list[tuple[int, ...]]:
        partitions = self._defaults.num_partitions if num_partitions == -1 else num_partitions
        factor = (
            self._defaults.replication_factor if replication_factor == -1 else replication_factor
        )
        if partitions <= 0:
            raise InvalidPartitionsError(
                "Number of partitions was set to an invalid non-positive value."
            )
        if factor <= 0:
            raise InvalidReplicationFactorError(
                "Replication factor must be larger than 0, or -1 to use the default value."
            )
        self._check_partition_limit(partitions, pending)
        return self._place(partitions, factor)

    def _place(self, partitions: int, factor: int) -> list[tuple[int, ...]]:
        cluster = self._replication.cluster_control
        usable = [
            UsableBroker(r.id, r.rack, r.fenced)
            for r in cluster.broker_registrations.values()
            if not r.in_controlled_shutdown
        ]
        try:
            return self._placer.place(partitions, factor, usable)
        except InvalidReplicationFactorError as e:
            # Kafka's createTopic wraps the placer's reason.
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {factor} time(s): {e.message}"
            ) from None

    def _manual_placements(
        self, assignments: Mapping[int, tuple[int, ...]]
    ) -> list[tuple[int, ...]]:
        if sorted(assignments) != list(range(len(assignments))):
            raise InvalidReplicaAssignmentError(
                "partitions should be a consecutive 0-based integer sequence"
            )
        placements = [assignments[p] for p in range(len(assignments))]
        for partition_id, replicas in enumerate(placements):
            self._replication.validate_manual_partition_assignment(replicas, len(placements[0]))
            if not any(self._replication.cluster_control.is_active(r) for r in replicas):
                raise InvalidReplicaAssignmentError(
                    f"All brokers specified in the manual partition assignment for partition "
                    f"{partition_id} are fenced or in controlled shutdown."
                )
        return placements

    def _new_partition(self, replicas: tuple[int, ...]) -> PartitionRegistration:
        isr = tuple(r for r in replicas if self._replication.cluster_control.is_active(r))
        return PartitionRegistration(
            replicas=replicas,
            directories=tuple(self._replication.default_dir(r) for r in replicas),
            isr=isr,
            removing_replicas=(),
            adding_replicas=(),
            leader=isr[0] if isr else NO_LEADER,
            leader_recovery_state=LeaderRecoveryState.RECOVERED,
            leader_epoch=0,
            partition_epoch=0,
        )

    def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], validate_only: bool
    ) -> ControllerResult[dict[str, KafkaError | None]]:
        """Kafka's ``createPartitions``."""
        records: list[ApiMessageAndVersion] = []
        results: dict[str, KafkaError | None] = {}
        for topic in topics:
            try:
                new = self._create_partitions(topic, len(records))
            except KafkaError as e:
                results[topic.name] = e
                continue
            records += new
            results[topic.name] = None
        return ControllerResult([] if validate_only else records, results)

    def _create_partitions(
        self, request: CreatePartitionsTopic, pending: int
    ) -> list[ApiMessageAndVersion]:
        replication = self._replication
        topic_id = replication.topics_by_name.get(request.name)
        if topic_id is None:
            raise UnknownTopicOrPartitionError()
        topic = replication.topics[topic_id]
        current = len(topic.parts)
        if request.count < current:
            raise InvalidPartitionsError(
                f"The topic {request.name} currently has {current} partition(s); "
                f"{request.count} would not be an increase."
            )
        if request.count == current:
            raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
        additional = request.count - current
        self._check_partition_limit(additional, pending)
        factor = len(topic.parts[0].replicas)
        if request.assignments is None:
            placements = self._place(additional, factor)
        else:
            if len(request.assignments) != additional:
                raise InvalidReplicaAssignmentError(
                    f"Attempted to add {additional} additional partition(s), but only "
                    f"{len(request.assignments)} assignment(s) were specified."
                )
            placements = list(request.assignments)
            for replicas in placements:
                replication.validate_manual_partition_assignment(replicas, factor)
                if not any(replication.cluster_control.is_active(r) for r in replicas):
                    raise InvalidReplicaAssignmentError(
                        f"All brokers specified in the manual partition assignment for "
                        f"partition {current} are fenced or in controlled shutdown."
                    )
        options = ImageWriterOptions(replication.feature_control.metadata_version)
        return [
            self._new_partition(replicas).to_record(topic_id, current + i, options)
            for i, replicas in enumerate(placements)
        ]

    def delete_topics(
        self, topic_ids: Sequence[uuid.UUID]
    ) -> ControllerResult[dict[uuid.UUID, KafkaError | None]]:
        """Kafka's ``deleteTopics``: one RemoveTopicRecord per topic."""
        records: list[ApiMessageAndVersion] = []
        results: dict[uuid.UUID, KafkaError | None] = {}
        for topic_id in topic_ids:
            if not self._defaults.delete_topic_enable:
                results[topic_id] = TopicDeletionDisabledError()
            elif topic_id not in self._replication.topics:
                results[topic_id] = UnknownTopicIdError()
            else:
                records.append(ApiMessageAndVersion(RemoveTopicRecord(topic_id=topic_id), 0))
                results[topic_id] = None
        return ControllerResult(records, results)

    def find_topic_ids(self, names: Sequence[str]) -> dict[str, uuid.UUID | KafkaError]:
        """Kafka's ``findTopicIds``, for DeleteTopics by name."""
        return {
            name: self._replication.topics_by_name.get(name) or UnknownTopicOrPartitionError()
            for name in names
        }


def _random_topic_id(rng: random.Random) -> uuid.UUID:
    # Kafka's Uuid.randomUuid never returns the zero or the metadata topic's id.
    while True:
        topic_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        if topic_id.int > 1:
            return topic_id
