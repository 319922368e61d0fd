"""AlterPartition, AssignReplicasToDirs and partition reassignments on the controller
(the partition half of Kafka's ``ReplicationControlManager``: ``alterPartition``,
``handleAssignReplicasToDirs``, ``alterPartitionReassignments``,
``listPartitionReassignments``, with ``PartitionReassignmentReplicas`` and
``PartitionReassignmentRevert``).

AlterPartition is a leader's ISR change, checked against the partition's epochs in Kafka's
order (``validateAlterPartitionData``). A reassignment adds its target replicas and
marks the ones leaving; PartitionChangeBuilder completes it once every adding replica is
in the ISR, and a cancellation reverts to the original replicas. AssignReplicasToDirs is
a broker saying which of its log directories holds each of its replicas (KIP-858).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace

from tiercel.protocol.errors import (
    FencedLeaderEpochError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaError,
    NoReassignmentInProgressError,
    NotControllerError,
    NotLeaderOrFollowerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.topic_records import PartitionChangeRecord
from tiercel.server.controller.controller_exceptions import (
    BrokerIdNotRegisteredError,
    IneligibleReplicaError,
    InvalidUpdateVersionError,
    NewLeaderElectedError,
    OperationNotAttemptedError,
)
from tiercel.server.controller.controller_requests import (
    AlterPartitionData,
    AlterPartitionResult,
    DirectoryAssignment,
    DirectoryAssignmentResult,
    OngoingReassignment,
    TopicIdPartition,
)
from tiercel.server.controller.controller_result import ControllerResult
from tiercel.server.controller.partition_change_builder import Election, PartitionChangeBuilder
from tiercel.server.controller.replication_control_manager import (
    ReplicationControlManager,
    TopicControlInfo,
    TopicPartitionKey,
)
from tiercel.server.metadata.image.partition_registration import (
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionRegistration,
)

__all__ = ["PartitionCommands"]


class PartitionCommands:
    """Event-loop only; pure (the records change the state when replayed)."""

    def __init__(self, replication: ReplicationControlManager) -> None:
        self._replication = replication

    # -- AssignReplicasToDirs -------------------------------------------------------

    def assign_replicas_to_dirs(
        self, broker_id: int, broker_epoch: int, directories: Sequence[DirectoryAssignment]
    ) -> ControllerResult[DirectoryAssignmentResult]:
        """Kafka's ``handleAssignReplicasToDirs``, from metadata.version 3.7-IV2: each
        named replica of the broker gets its directory; a replica placed in a directory
        already offline leaves its ISR and leadership, as ``handleDirectoriesOffline``
        would have moved it."""
        replication = self._replication
        if not replication.feature_control.metadata_version.is_directory_assignment_supported():
            raise UnsupportedVersionError("Directory assignment is not supported yet.")
        replication.cluster_control.check_broker_epoch(broker_id, broker_epoch)
        registration = replication.cluster_control.registration(broker_id)
        if registration is None:
            raise BrokerIdNotRegisteredError(f"Broker ID {broker_id} is not currently registered")
        records: list[ApiMessageAndVersion] = []
        response: DirectoryAssignmentResult = []
        for assignment in directories:
            directory = assignment.directory_id
            is_offline = not registration.has_online_dir(directory)
            topics = []
            for topic_id, partition_ids in assignment.topics:
                topic = replication.topics.get(topic_id)
                results: list[tuple[int, KafkaError | None]] = [
                    (p, self._assign_replica(broker_id, topic, p, directory, is_offline, records))
                    for p in partition_ids
                ]
                topics.append((topic_id, results))
            response.append((directory, topics))
        return ControllerResult(records, response)

    def _assign_replica(
        self,
        broker_id: int,
        topic: TopicControlInfo | None,
        partition_id: int,
        directory: uuid.UUID,
        is_offline: bool,
        records: list[ApiMessageAndVersion],
    ) -> KafkaError | None:
        if topic is None:
            return UnknownTopicIdError()
        partition = topic.parts.get(partition_id)
        if partition is None:
            return UnknownTopicOrPartitionError()
        if broker_id not in partition.replicas:
            return NotLeaderOrFollowerError()
        replication = self._replication
        # Leaders are judged with the replica in its new directory: Kafka's
        # LeaderAcceptor reads the directory before the assignment, so a replica moved
        # into a failed directory could be elected by the very change that moves it.
        placed = replace(
            partition,
            directories=tuple(
                directory if r == broker_id else partition.directory(r) for r in partition.replicas
            ),
        )
        builder = PartitionChangeBuilder(
            partition,
            topic.id,
            partition_id,
            replication.leader_acceptor(placed),
            replication.feature_control.metadata_version,
            replication.default_dir,
        ).set_directory(broker_id, directory)
        if is_offline:
            # Out of the ISR in the same record (Kafka writes a second one, built from
            # the partition before the first, as generateLeaderAndIsrUpdates does).
            builder.set_target_isr([r for r in partition.isr if r != broker_id])
            if replication.configuration_control.unclean_leader_election_enabled_for_topic(
                topic.name
            ):
                builder.set_election(Election.UNCLEAN)
        record = builder.build()
        if record is not None:
            records.append(record)
        return None

    # -- AlterPartition -------------------------------------------------------------

    def alter_partition(
        self,
        broker_id: int,
        broker_epoch: int,
        topics: Sequence[tuple[uuid.UUID, str, Sequence[AlterPartitionData]]],
        request_version: int,
    ) -> ControllerResult[list[tuple[uuid.UUID, str, list[AlterPartitionResult]]]]:
        """Kafka's ``alterPartition``: a leader's ISR change, checked against the
        partition's epochs; STALE_BROKER_EPOCH for the whole request."""
        self._replication.cluster_control.check_broker_epoch(broker_id, broker_epoch)
        records: list[ApiMessageAndVersion] = []
        response = []
        for topic_id, topic_name, partitions in topics:
            resolved = (
                topic_id
                if request_version > 1
                else self._replication.topics_by_name.get(topic_name)
            )
            topic = self._replication.topics.get(resolved) if resolved is not None else None
            if topic is None:
                error: KafkaError = (
                    UnknownTopicIdError() if request_version > 1 else UnknownTopicOrPartitionError()
                )
                response.append(
                    (
                        topic_id,
                        topic_name,
                        [AlterPartitionResult(p.partition_index, error) for p in partitions],
                    )
                )
                continue
            results = [
                self._alter_partition(broker_id, topic, data, request_version, records)
                for data in partitions
            ]
            response.append((topic_id, topic_name, results))
        return ControllerResult(records, response)

    def _alter_partition(
        self,
        broker_id: int,
        topic: TopicControlInfo,
        data: AlterPartitionData,
        request_version: int,
        records: list[ApiMessageAndVersion],
    ) -> AlterPartitionResult:
        partition = topic.parts.get(data.partition_index)
        error = self._validate_alter_partition(broker_id, partition, data, request_version)
        if error is not None or partition is None:
            return AlterPartitionResult(
                data.partition_index, error or UnknownTopicOrPartitionError()
            )
        tp = TopicIdPartition(topic.id, data.partition_index)
        builder = self._replication.change_builder(tp, partition)
        builder.set_target_isr([b for b, _ in data.new_isr])
        builder.set_target_leader_recovery_state(data.leader_recovery_state)
        record = builder.build()
        if record is not None:
            records.append(record)
            change = record.message
            assert isinstance(change, PartitionChangeRecord)
            partition = partition.merge(change)
            if change.leader not in (broker_id, NO_LEADER_CHANGE):
                # A completed reassignment moved the leadership away.
                moved: KafkaError = (
                    NewLeaderElectedError() if request_version > 1 else FencedLeaderEpochError()
                )
                return AlterPartitionResult(data.partition_index, moved)
        return AlterPartitionResult(
            data.partition_index,
            None,
            leader_id=partition.leader,
            leader_epoch=partition.leader_epoch,
            isr=partition.isr,
            leader_recovery_state=partition.leader_recovery_state,
            partition_epoch=partition.partition_epoch,
        )

    def _validate_alter_partition(
        self,
        broker_id: int,
        partition: PartitionRegistration | None,
        data: AlterPartitionData,
        request_version: int,
    ) -> KafkaError | None:
        # Kafka's validateAlterPartitionData, in its order.
        if partition is None:
            return UnknownTopicOrPartitionError()
        if (
            data.leader_epoch > partition.leader_epoch
            or data.partition_epoch > partition.partition_epoch
        ):
            # The leader knows a newer partition state: this controller is likely stale.
            return NotControllerError()
        if data.leader_epoch < partition.leader_epoch:
            return FencedLeaderEpochError()
        if broker_id != partition.leader:
            return InvalidRequestError()
        if data.partition_epoch < partition.partition_epoch:
            return InvalidUpdateVersionError()
        new_isr = [b for b, _ in data.new_isr]
        if (
            len(set(new_isr)) != len(new_isr)
            or not set(new_isr) <= set(partition.replicas)
            or not new_isr
        ):
            return InvalidRequestError()
        if partition.leader not in new_isr:
            return InvalidRequestError()
        if data.leader_recovery_state == LeaderRecoveryState.RECOVERING and len(new_isr) > 1:
            return InvalidRequestError()
        if (
            partition.leader_recovery_state == LeaderRecoveryState.RECOVERED
            and data.leader_recovery_state == LeaderRecoveryState.RECOVERING
        ):
            return InvalidRequestError()
        if any(not self._eligible_for_isr(b, epoch) for b, epoch in data.new_isr):
            return IneligibleReplicaError() if request_version > 1 else OperationNotAttemptedError()
        return None

    def _eligible_for_isr(self, broker_id: int, broker_epoch: int) -> bool:
        # Kafka's ineligibleReplicasForIsr: registered, unfenced, not shutting down, and
        # the incarnation the leader saw when it gave an epoch.
        registration = self._replication.cluster_control.registration(broker_id)
        return (
            registration is not None
            and registration.is_active
            and broker_epoch in (-1, registration.epoch)
        )

    # -- reassignments --------------------------------------------------------------

    def alter_partition_reassignments(
        self, changes: Mapping[str, Mapping[int, tuple[int, ...] | None]]
    ) -> ControllerResult[dict[TopicPartitionKey, KafkaError | None]]:
        """Kafka's ``alterPartitionReassignments``: a target replica list starts (or
        replaces) a reassignment, None cancels one."""
        records: list[ApiMessageAndVersion] = []
        results: dict[TopicPartitionKey, KafkaError | None] = {}
        for name, partitions in changes.items():
            for partition_id, target in partitions.items():
                try:
                    record = self._change_reassignment(name, partition_id, target)
                except KafkaError as e:
                    results[(name, partition_id)] = e
                    continue
                if record is not None:
                    records.append(record)
                results[(name, partition_id)] = None
        return ControllerResult(records, results)

    def _change_reassignment(
        self, topic_name: str, partition_id: int, target: tuple[int, ...] | None
    ) -> ApiMessageAndVersion | None:
        topic_id = self._replication.topics_by_name.get(topic_name)
        partition = (
            None if topic_id is None else self._replication.topics[topic_id].parts.get(partition_id)
        )
        if topic_id is None or partition is None:
            raise UnknownTopicOrPartitionError()
        tp = TopicIdPartition(topic_id, partition_id)
        builder = self._replication.change_builder(tp, partition)
        if target is None:
            return self._cancel_reassignment(topic_name, partition_id, partition, builder)
        self._replication.validate_manual_partition_assignment(target, None)
        # Kafka's PartitionReassignmentReplicas: the target, then the replicas leaving.
        removing = tuple(r for r in partition.replicas if r not in target)
        adding = tuple(r for r in target if r not in partition.replicas)
        builder.election = Election.ONLINE
        builder.set_target_replicas(
            target + removing,
            removing or partition.removing_replicas,
            adding or partition.adding_replicas,
        )
        return builder.build()

    def _cancel_reassignment(
        self,
        topic_name: str,
        partition_id: int,
        partition: PartitionRegistration,
        builder: PartitionChangeBuilder,
    ) -> ApiMessageAndVersion | None:
        # Kafka's cancelPartitionReassignment and PartitionReassignmentRevert.
        if not partition.is_reassigning:
            raise NoReassignmentInProgressError()
        replicas = tuple(r for r in partition.replicas if r not in partition.adding_replicas)
        isr = [r for r in partition.isr if r not in partition.adding_replicas]
        if not isr:
            if builder.election != Election.UNCLEAN:
                raise InvalidReplicaAssignmentError(
                    f"Unable to revert partition assignment for {topic_name}:{partition_id} "
                    "because it would require an unclean leader election."
                )
            isr = [replicas[0]]
        builder.set_target_isr(isr)
        builder.set_target_replicas(replicas, (), ())
        return builder.build()

    def list_partition_reassignments(
        self, topics: Mapping[str, Sequence[int]] | None
    ) -> list[OngoingReassignment]:
        """Kafka's ``listPartitionReassignments``: ongoing ones among those asked (all
        when None); unknown topics and partitions are left out."""
        if topics is None:
            wanted = self._replication.reassigning_partitions()
        else:
            wanted = [
                TopicIdPartition(self._replication.topics_by_name[name], p)
                for name, ids in topics.items()
                if name in self._replication.topics_by_name
                for p in ids
            ]
        ongoing = []
        for tp in wanted:
            partition = self._replication.partition(tp.topic_id, tp.partition_id)
            if partition is not None and partition.is_reassigning:
                ongoing.append(
                    OngoingReassignment(
                        self._replication.topics[tp.topic_id].name,
                        tp.partition_id,
                        partition.replicas,
                        partition.adding_replicas,
                        partition.removing_replicas,
                    )
                )
        return ongoing
