"""Topics, partitions and their leaders and ISRs (Kafka's ``ReplicationControlManager``):
TopicRecord, PartitionRecord, PartitionChangeRecord and RemoveTopicRecord replayed into
one registration per partition, with Kafka's ``BrokersToIsrs`` indexes (which partitions
each broker is in the ISR of, leads, and which have no leader).

This module holds the state, its replay and the leadership changes brokers cause
(fencing, unfencing, controlled shutdown, unregistration, AlterPartition, ElectLeaders,
reassignments); creating and deleting topics is in `topic_commands`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from tiercel.protocol.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FencedLeaderEpochError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaError,
    NoReassignmentInProgressError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from tiercel.protocol.metadata.field_types import ZERO_UUID
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.topic_records import (
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tiercel.server.controller.broker_heartbeat_manager import BrokerControlState
from tiercel.server.controller.cluster_control_manager import ClusterControlManager
from tiercel.server.controller.configuration_control_manager import ConfigurationControlManager
from tiercel.server.controller.controller_exceptions import (
    IneligibleReplicaError,
    InvalidUpdateVersionError,
    NewLeaderElectedError,
    OperationNotAttemptedError,
)
from tiercel.server.controller.controller_requests import (
    AlterPartitionData,
    AlterPartitionResult,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    ElectionType,
    OngoingReassignment,
    TopicIdPartition,
)
from tiercel.server.controller.controller_result import ControllerResult
from tiercel.server.controller.feature_control_manager import FeatureControlManager
from tiercel.server.controller.partition_change_builder import Election, PartitionChangeBuilder
from tiercel.server.controller.partition_registration import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    RECOVERED,
    RECOVERING,
    PartitionRegistration,
)

__all__ = ["ReplicationControlManager", "TopicControlInfo"]

TopicPartitionKey = tuple[str, int]


@dataclass(slots=True)
class TopicControlInfo:
    name: str
    id: uuid.UUID
    parts: dict[int, PartitionRegistration] = field(default_factory=dict)


class ReplicationControlManager:
    """Event-loop only. Invariant: the indexes agree with ``topics`` after every replay."""

    def __init__(
        self,
        cluster_control: ClusterControlManager,
        feature_control: FeatureControlManager,
        configuration_control: ConfigurationControlManager,
    ) -> None:
        self.cluster_control = cluster_control
        self.feature_control = feature_control
        self.configuration_control = configuration_control
        self.topics: dict[uuid.UUID, TopicControlInfo] = {}
        self.topics_by_name: dict[str, uuid.UUID] = {}
        self._isr_members: dict[int, set[TopicIdPartition]] = {}
        self._leaders: dict[int, set[TopicIdPartition]] = {}
        self._leaderless: set[TopicIdPartition] = set()
        self._reassigning: set[TopicIdPartition] = set()
        # Partitions not led by their preferred replica (Kafka's imbalancedPartitions).
        self._imbalanced: set[TopicIdPartition] = set()

    # -- queries --------------------------------------------------------------------

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        topic = self.topics.get(topic_id)
        return None if topic is None else topic.parts.get(partition_id)

    def has_leaderships(self, broker_id: int) -> bool:
        return bool(self._leaders.get(broker_id))

    def partitions_with_broker_in_isr(self, broker_id: int) -> list[TopicIdPartition]:
        return sorted(self._isr_members.get(broker_id, ()))

    def partitions_with_no_leader(self) -> list[TopicIdPartition]:
        return sorted(self._leaderless)

    # -- replay ---------------------------------------------------------------------

    def replay_topic(self, record: TopicRecord) -> None:
        self.topics[record.topic_id] = TopicControlInfo(record.name, record.topic_id)
        self.topics_by_name[record.name] = record.topic_id

    def replay_partition(self, record: PartitionRecord) -> None:
        topic = self._topic_for_replay(record.topic_id)
        tp = TopicIdPartition(record.topic_id, record.partition_id)
        new = PartitionRegistration.from_record(record)
        self._update_indexes(tp, topic.parts.get(record.partition_id), new)
        topic.parts[record.partition_id] = new

    def replay_partition_change(self, record: PartitionChangeRecord) -> None:
        topic = self._topic_for_replay(record.topic_id)
        old = topic.parts.get(record.partition_id)
        if old is None:
            raise RuntimeError(f"Unable to replay {record}: unknown partition")
        new = old.merge(record)
        self._update_indexes(TopicIdPartition(record.topic_id, record.partition_id), old, new)
        topic.parts[record.partition_id] = new

    def replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        topic = self.topics.pop(record.topic_id, None)
        if topic is None:
            raise RuntimeError(f"Unable to replay {record}: no topic with that id")
        del self.topics_by_name[topic.name]
        for partition_id, partition in topic.parts.items():
            self._update_indexes(TopicIdPartition(topic.id, partition_id), partition, None)
        self.configuration_control.delete_topic_configs(topic.name)

    def _topic_for_replay(self, topic_id: uuid.UUID) -> TopicControlInfo:
        topic = self.topics.get(topic_id)
        if topic is None:
            raise RuntimeError(f"Unable to replay a partition of unknown topic id {topic_id}")
        return topic

    def _update_indexes(
        self,
        tp: TopicIdPartition,
        old: PartitionRegistration | None,
        new: PartitionRegistration | None,
    ) -> None:
        if old is not None:
            for broker_id in old.isr:
                self._isr_members[broker_id].discard(tp)
            if old.leader == NO_LEADER:
                self._leaderless.discard(tp)
            else:
                self._leaders[old.leader].discard(tp)
            self._reassigning.discard(tp)
            self._imbalanced.discard(tp)
        if new is not None:
            for broker_id in new.isr:
                self._isr_members.setdefault(broker_id, set()).add(tp)
            if new.leader == NO_LEADER:
                self._leaderless.add(tp)
            else:
                self._leaders.setdefault(new.leader, set()).add(tp)
            if new.is_reassigning:
                self._reassigning.add(tp)
            if new.leader != new.preferred_replica:
                self._imbalanced.add(tp)

    def records(self) -> Iterator[ApiMessageAndVersion]:
        version = self.feature_control.metadata_version
        for name in sorted(self.topics_by_name):
            topic = self.topics[self.topics_by_name[name]]
            yield ApiMessageAndVersion(TopicRecord(name=name, topic_id=topic.id), 0)
            for partition_id in sorted(topic.parts):
                yield topic.parts[partition_id].to_record(topic.id, partition_id, version)

    # -- building partition changes -------------------------------------------------

    def default_dir(self, broker_id: int) -> uuid.UUID:
        """A new replica's directory: its broker's only one, else unassigned (Kafka's
        ``ClusterControlManager.defaultDir``)."""
        registration = self.cluster_control.registration(broker_id)
        if registration is not None and len(registration.log_dirs) == 1:
            return registration.log_dirs[0]
        return ZERO_UUID

    def change_builder(
        self,
        tp: TopicIdPartition,
        partition: PartitionRegistration,
        is_acceptable_leader: Callable[[int], bool] | None = None,
    ) -> PartitionChangeBuilder:
        """A builder whose acceptable leaders are the active brokers unless told otherwise
        (Kafka's ``LeaderAcceptor``), electing uncleanly if the topic allows it."""
        builder = PartitionChangeBuilder(
            partition,
            tp.topic_id,
            tp.partition_id,
            is_acceptable_leader or self.cluster_control.is_active,
            self.feature_control.metadata_version,
            self.default_dir,
        )
        if self.configuration_control.unclean_leader_election_enabled_for_topic(
            self.topics[tp.topic_id].name
        ):
            builder.set_election(Election.UNCLEAN)
        return builder

    def generate_leader_and_isr_updates(
        self,
        broker_to_remove: int,
        broker_to_add: int,
        partitions: Iterable[TopicIdPartition],
        records: list[ApiMessageAndVersion],
    ) -> None:
        """Kafka's ``generateLeaderAndIsrUpdates``: ``broker_to_remove`` leaves each ISR
        and may not lead; ``broker_to_add`` may lead although its unfencing is not
        replayed yet."""

        def acceptable(r: int) -> bool:
            return r != broker_to_remove and (
                r == broker_to_add or self.cluster_control.is_active(r)
            )

        for tp in partitions:
            partition = self.topics[tp.topic_id].parts[tp.partition_id]
            builder = self.change_builder(tp, partition, acceptable)
            builder.set_target_isr([r for r in partition.isr if r != broker_to_remove])
            record = builder.build()
            if record is not None:
                records.append(record)

    # -- broker lifecycle -----------------------------------------------------------

    def process_broker_heartbeat(
        self, request: BrokerHeartbeatRequest, register_broker_record_offset: int
    ) -> ControllerResult[BrokerHeartbeatReply]:
        """Kafka's ``processBrokerHeartbeat``: moves the broker between fenced, unfenced,
        controlled shutdown and shut down, with the partition changes each needs."""
        broker_id = request.broker_id
        self.cluster_control.check_broker_epoch(broker_id, request.broker_epoch)
        heartbeats = self.cluster_control.heartbeat_manager
        if heartbeats is None:
            raise NotControllerError("This controller is not active.")
        states = heartbeats.calculate_next_broker_state(
            self.cluster_control.current_broker_state(broker_id),
            request.want_fence,
            request.want_shut_down,
            request.current_metadata_offset,
            register_broker_record_offset,
            lambda: self.has_leaderships(broker_id),
        )
        records: list[ApiMessageAndVersion] = []
        if states.current != states.next:
            if states.next in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW):
                self.handle_broker_fenced(broker_id, records)
            elif states.next == BrokerControlState.UNFENCED:
                self.handle_broker_unfenced(broker_id, records)
            else:
                self.handle_broker_in_controlled_shutdown(broker_id, records)
        heartbeats.touch(broker_id, request.current_metadata_offset)
        reply = BrokerHeartbeatReply(
            is_caught_up=request.current_metadata_offset >= register_broker_record_offset,
            is_fenced=states.next.fenced,
            in_controlled_shutdown=states.next.in_controlled_shutdown,
            should_shut_down=states.next.should_shut_down,
        )
        return ControllerResult(records, reply)

    def handle_broker_fenced(self, broker_id: int, records: list[ApiMessageAndVersion]) -> None:
        """Leave every ISR, lose every leadership, then the fencing record."""
        self.generate_leader_and_isr_updates(
            broker_id, NO_LEADER, self.partitions_with_broker_in_isr(broker_id), records
        )
        records.append(self.cluster_control.fence_record(broker_id))

    def handle_broker_unfenced(self, broker_id: int, records: list[ApiMessageAndVersion]) -> None:
        """The unfencing record, then leaders for leaderless partitions it can lead."""
        records.append(self.cluster_control.unfence_record(broker_id))
        self.generate_leader_and_isr_updates(
            NO_LEADER, broker_id, self.partitions_with_no_leader(), records
        )

    def handle_broker_in_controlled_shutdown(
        self, broker_id: int, records: list[ApiMessageAndVersion]
    ) -> None:
        registration = self.cluster_control.registration(broker_id)
        if registration is not None and not registration.in_controlled_shutdown:
            records.append(self.cluster_control.controlled_shutdown_record(broker_id))
        self.generate_leader_and_isr_updates(
            broker_id, NO_LEADER, self.partitions_with_broker_in_isr(broker_id), records
        )

    def handle_broker_unclean_shutdown(
        self, broker_id: int, records: list[ApiMessageAndVersion]
    ) -> None:
        """A new incarnation registers: the old one may have died with unflushed data, so
        the broker leaves every ISR and may not lead until it is unfenced again (Kafka's
        ``handleBrokerUncleanShutdown``, from metadata.version 4.0-IV1, KIP-966)."""
        if not self.feature_control.metadata_version.is_elr_supported():
            return
        self.generate_leader_and_isr_updates(
            broker_id, NO_LEADER, self.partitions_with_broker_in_isr(broker_id), records
        )

    def unregister_broker(self, broker_id: int) -> ControllerResult[None]:
        """Kafka's ``unregisterBroker``: out of every ISR, then UnregisterBrokerRecord."""
        unregister = self.cluster_control.unregister_record(broker_id)
        records: list[ApiMessageAndVersion] = []
        self.generate_leader_and_isr_updates(
            broker_id, NO_LEADER, self.partitions_with_broker_in_isr(broker_id), records
        )
        records.append(unregister)
        return ControllerResult(records, None)

    def maybe_fence_one_stale_broker(self) -> ControllerResult[int | None]:
        """Fence the first unfenced broker whose session expired, if any (Kafka's
        ``maybeFenceOneStaleBroker``; one a time keeps each batch small)."""
        heartbeats = self.cluster_control.heartbeat_manager
        if heartbeats is None:
            return ControllerResult([], None)
        unfenced = [
            b for b, r in sorted(self.cluster_control.broker_registrations.items()) if not r.fenced
        ]
        stale = heartbeats.find_stale_brokers(unfenced)
        if not stale:
            return ControllerResult([], None)
        records: list[ApiMessageAndVersion] = []
        self.handle_broker_fenced(stale[0], records)
        heartbeats.remove(stale[0])
        return ControllerResult(records, stale[0])

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
        self.cluster_control.check_broker_epoch(broker_id, broker_epoch)
        records: list[ApiMessageAndVersion] = []
        response = []
        for topic_id, topic_name, partitions in topics:
            resolved = topic_id if request_version > 1 else self.topics_by_name.get(topic_name)
            topic = self.topics.get(resolved) if resolved is not None else None
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
        builder = self.change_builder(tp, partition)
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
        if data.leader_recovery_state == RECOVERING and len(new_isr) > 1:
            return InvalidRequestError()
        if (
            partition.leader_recovery_state == RECOVERED
            and data.leader_recovery_state == RECOVERING
        ):
            return InvalidRequestError()
        if any(not self._eligible_for_isr(b, epoch) for b, epoch in data.new_isr):
            return IneligibleReplicaError() if request_version > 1 else OperationNotAttemptedError()
        return None

    def _eligible_for_isr(self, broker_id: int, broker_epoch: int) -> bool:
        # Kafka's ineligibleReplicasForIsr: registered, unfenced, not shutting down, and
        # the incarnation the leader saw when it gave an epoch.
        registration = self.cluster_control.registration(broker_id)
        return (
            registration is not None
            and registration.is_active
            and broker_epoch in (-1, registration.epoch)
        )

    # -- ElectLeaders ---------------------------------------------------------------

    def elect_leaders(
        self, election_type: ElectionType, partitions: Mapping[str, Sequence[int]] | None
    ) -> ControllerResult[dict[TopicPartitionKey, KafkaError | None]]:
        """Kafka's ``electLeaders``. Without partitions every partition is tried and
        only those that needed an election are reported."""
        records: list[ApiMessageAndVersion] = []
        results: dict[TopicPartitionKey, KafkaError | None] = {}
        if partitions is None:
            wanted = {
                t.name: sorted(t.parts) for t in sorted(self.topics.values(), key=lambda t: t.name)
            }
        else:
            wanted = {name: list(ids) for name, ids in partitions.items()}
        for name, ids in wanted.items():
            for partition_id in ids:
                error = self._elect_leader(name, partition_id, election_type, records)
                if partitions is not None or not isinstance(error, ElectionNotNeededError):
                    results[(name, partition_id)] = error
        return ControllerResult(records, results)

    def _elect_leader(
        self,
        topic_name: str,
        partition_id: int,
        election_type: ElectionType,
        records: list[ApiMessageAndVersion],
    ) -> KafkaError | None:
        topic_id = self.topics_by_name.get(topic_name)
        if topic_id is None:
            return UnknownTopicOrPartitionError(f"No such topic as {topic_name}")
        partition = self.topics[topic_id].parts.get(partition_id)
        if partition is None:
            return UnknownTopicOrPartitionError(f"No such partition as {topic_name}-{partition_id}")
        if (
            election_type == ElectionType.PREFERRED
            and partition.leader == partition.preferred_replica
        ):
            return ElectionNotNeededError()
        if election_type == ElectionType.UNCLEAN and partition.leader != NO_LEADER:
            return ElectionNotNeededError()
        builder = self.change_builder(TopicIdPartition(topic_id, partition_id), partition)
        builder.set_election(
            Election.PREFERRED if election_type == ElectionType.PREFERRED else Election.UNCLEAN
        )
        record = builder.build()
        if record is None:
            if election_type == ElectionType.PREFERRED:
                return PreferredLeaderNotAvailableError()
            return EligibleLeadersNotAvailableError()
        records.append(record)
        return None

    def are_partition_leaders_imbalanced(self) -> bool:
        return bool(self._imbalanced)

    def maybe_balance_partition_leaders(self, max_elections: int) -> ControllerResult[bool]:
        """Preferred elections for up to ``max_elections`` partitions not led by their
        preferred replica (Kafka's ``maybeBalancePartitionLeaders``, the periodic task
        of ``auto.leader.rebalance.enable``); True if more may be waiting."""
        records: list[ApiMessageAndVersion] = []
        for tp in sorted(self._imbalanced):
            if len(records) >= max_elections:
                break
            partition = self.topics[tp.topic_id].parts[tp.partition_id]
            builder = PartitionChangeBuilder(
                partition,
                tp.topic_id,
                tp.partition_id,
                self.cluster_control.is_active,
                self.feature_control.metadata_version,
                self.default_dir,
            ).set_election(Election.PREFERRED)
            record = builder.build()
            if record is not None:
                records.append(record)
        return ControllerResult(records, len(records) >= max_elections)

    def maybe_elect_unclean_leaders(self, max_elections: int) -> ControllerResult[bool]:
        """Unclean elections for leaderless partitions of topics that allow them (Kafka's
        ``maybeElectUncleanLeaders``: a topic whose setting was turned on after its
        partitions lost their leaders); True if more may be waiting."""
        records: list[ApiMessageAndVersion] = []
        for tp in self.partitions_with_no_leader():
            if len(records) >= max_elections:
                break
            name = self.topics[tp.topic_id].name
            if self.configuration_control.unclean_leader_election_enabled_for_topic(name):
                self._elect_leader(name, tp.partition_id, ElectionType.UNCLEAN, records)
        return ControllerResult(records, len(records) >= max_elections)

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
        topic_id = self.topics_by_name.get(topic_name)
        partition = None if topic_id is None else self.topics[topic_id].parts.get(partition_id)
        if topic_id is None or partition is None:
            raise UnknownTopicOrPartitionError()
        tp = TopicIdPartition(topic_id, partition_id)
        builder = self.change_builder(tp, partition)
        if target is None:
            return self._cancel_reassignment(topic_name, partition_id, partition, builder)
        self.validate_manual_partition_assignment(target, None)
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

    def validate_manual_partition_assignment(
        self, replicas: Sequence[int], replication_factor: int | None
    ) -> None:
        """Kafka's ``validateManualPartitionAssignment``."""
        if not replicas:
            raise InvalidReplicaAssignmentError(
                "The manual partition assignment includes an empty replica list."
            )
        previous = None
        for broker_id in sorted(replicas):
            if self.cluster_control.registration(broker_id) is None:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes broker {broker_id}, but no "
                    "such broker is registered."
                )
            if broker_id == previous:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes the broker {broker_id} more "
                    "than once."
                )
            previous = broker_id
        if replication_factor is not None and len(replicas) != replication_factor:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes a partition with {len(replicas)} "
                f"replica(s), but this is not consistent with previous partitions, which have "
                f"{replication_factor} replica(s)."
            )

    def list_partition_reassignments(
        self, topics: Mapping[str, Sequence[int]] | None
    ) -> list[OngoingReassignment]:
        """Kafka's ``listPartitionReassignments``: ongoing ones among those asked (all
        when None); unknown topics and partitions are left out."""
        if topics is None:
            wanted = sorted(self._reassigning)
        else:
            wanted = [
                TopicIdPartition(self.topics_by_name[name], p)
                for name, ids in topics.items()
                if name in self.topics_by_name
                for p in ids
            ]
        ongoing = []
        for tp in wanted:
            partition = self.partition(tp.topic_id, tp.partition_id)
            if partition is not None and partition.is_reassigning:
                ongoing.append(
                    OngoingReassignment(
                        self.topics[tp.topic_id].name,
                        tp.partition_id,
                        partition.replicas,
                        partition.adding_replicas,
                        partition.removing_replicas,
                    )
                )
        return ongoing
