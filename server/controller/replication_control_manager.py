"""Topics, partitions and their leaders and ISRs (Kafka's ``ReplicationControlManager``):
TopicRecord, PartitionRecord, PartitionChangeRecord and RemoveTopicRecord replayed into
one registration per partition, with Kafka's ``BrokersToIsrs`` indexes (which partitions
each broker is in the ISR of, leads, and which have no leader).

This module holds the state, its replay and the leadership changes brokers and elections
cause (fencing, unfencing, controlled shutdown, unregistration, ElectLeaders, the periodic
preferred and unclean elections); creating and deleting topics is in `topic_commands`,
AlterPartition and reassignments in `partition_commands`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from tiercel.protocol.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidReplicaAssignmentError,
    KafkaError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.topic_records import (
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tiercel.server.controller.broker_heartbeat_manager import BrokerControlState
from tiercel.server.controller.broker_registration import is_reserved_directory
from tiercel.server.controller.cluster_control_manager import ClusterControlManager
from tiercel.server.controller.configuration_control_manager import ConfigurationControlManager
from tiercel.server.controller.controller_requests import (
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    ElectionType,
    TopicIdPartition,
)
from tiercel.server.controller.controller_result import ControllerResult
from tiercel.server.controller.feature_control_manager import FeatureControlManager
from tiercel.server.controller.partition_change_builder import Election, PartitionChangeBuilder
from tiercel.server.metadata.image.image_writer import ImageWriterOptions
from tiercel.server.metadata.image.partition_registration import (
    MIGRATING_DIRECTORY,
    NO_LEADER,
    UNASSIGNED_DIRECTORY,
    PartitionRegistration,
)

__all__ = ["ReplicationControlManager", "TopicControlInfo"]

_log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]


@dataclass(slots=True)
class TopicControlInfo:
    """A topic and its partitions by id (Kafka's ``TopicControlInfo``). Event-loop only."""

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
        # The partitions with a replica in each directory (Kafka's
        # directoriesToPartitions; KIP-858): what a failed directory takes offline.
        self._directories_to_partitions: dict[uuid.UUID, set[TopicIdPartition]] = {}

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

    def reassigning_partitions(self) -> list[TopicIdPartition]:
        return sorted(self._reassigning)

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
            for directory in _assigned(old.directories):
                partitions = self._directories_to_partitions[directory]
                partitions.discard(tp)
                if not partitions:
                    del self._directories_to_partitions[directory]
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
            for directory in _assigned(new.directories):
                self._directories_to_partitions.setdefault(directory, set()).add(tp)

    def records(self) -> Iterator[ApiMessageAndVersion]:
        options = ImageWriterOptions(self.feature_control.metadata_version)
        for name in sorted(self.topics_by_name):
            topic = self.topics[self.topics_by_name[name]]
            yield ApiMessageAndVersion(TopicRecord(name=name, topic_id=topic.id), 0)
            for partition_id in sorted(topic.parts):
                yield topic.parts[partition_id].to_record(topic.id, partition_id, options)

    # -- building partition changes -------------------------------------------------

    def default_dir(self, broker_id: int) -> uuid.UUID:
        """A new replica's directory (Kafka's ``ClusterControlManager.defaultDir``): its
        broker's only one; UNASSIGNED when the broker has several (it chooses and
        reports) or is not registered; MIGRATING when it registered none."""
        registration = self.cluster_control.registration(broker_id)
        if registration is None:
            return UNASSIGNED_DIRECTORY
        if not registration.log_dirs:
            return MIGRATING_DIRECTORY
        if len(registration.log_dirs) == 1:
            return registration.log_dirs[0]
        return UNASSIGNED_DIRECTORY

    def leader_acceptor(
        self,
        partition: PartitionRegistration,
        is_acceptable_leader: Callable[[int], bool] | None = None,
    ) -> Callable[[int], bool]:
        """Kafka's ``LeaderAcceptor``: an acceptable broker (an active one unless told
        otherwise) whose replica's directory is online (KIP-858)."""
        acceptable = is_acceptable_leader or self.cluster_control.is_active

        def accept(broker_id: int) -> bool:
            if not acceptable(broker_id):
                return False
            # A replica a reassignment is adding has no directory yet: a new one.
            if broker_id not in partition.replicas:
                return True
            return self.cluster_control.has_online_dir(broker_id, partition.directory(broker_id))

        return accept

    def change_builder(
        self,
        tp: TopicIdPartition,
        partition: PartitionRegistration,
        is_acceptable_leader: Callable[[int], bool] | None = None,
    ) -> PartitionChangeBuilder:
        """A builder whose leaders are those of `leader_acceptor`, electing uncleanly if
        the topic allows it."""
        builder = PartitionChangeBuilder(
            partition,
            tp.topic_id,
            tp.partition_id,
            self.leader_acceptor(partition, is_acceptable_leader),
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
        # Kafka handles the failed directories in the same heartbeat as a state change,
        # building both changes from the same unreplayed partitions, which can contradict
        # each other (unfencing elects the broker where the directory change shrinks the
        # ISR without it). Brokers name their failed directories in every heartbeat, so
        # after a state change they are handled at the next one.
        if (
            states.current == states.next
            and self.feature_control.metadata_version.is_directory_assignment_supported()
        ):
            self.handle_directories_offline(broker_id, request.offline_log_dirs, records)
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

    def handle_directories_offline(
        self,
        broker_id: int,
        offline_dirs: Sequence[uuid.UUID],
        records: list[ApiMessageAndVersion],
    ) -> None:
        """Kafka's ``handleDirectoriesOffline`` (KIP-858): for each directory the broker
        reports failed that its registration still has online, its replicas there leave
        their ISRs and leaderships (another ISR member leads, as on fencing); then the
        directories left online in a BrokerRegistrationChangeRecord v2. A directory
        reported again changes nothing. When none is left online the record names none,
        which replays as no change, as in Kafka: such a broker halts."""
        registration = self.cluster_control.registration(broker_id)
        if registration is None:
            return
        newly_offline = registration.directory_intersection(offline_dirs)
        if not newly_offline:
            return
        for directory in newly_offline:
            partitions = sorted(self._directories_to_partitions.get(directory, ()))
            self.generate_leader_and_isr_updates(broker_id, NO_LEADER, partitions, records)
        online = registration.directory_difference(offline_dirs)
        records.append(self.cluster_control.log_dirs_record(broker_id, online))
        _log.warning(
            "Directories %s in broker %d marked offline, remaining directories: %s",
            [str(d) for d in newly_offline],
            broker_id,
            [str(d) for d in online],
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
                error = self.elect_leader(name, partition_id, election_type, records)
                if partitions is not None or not isinstance(error, ElectionNotNeededError):
                    results[(name, partition_id)] = error
        return ControllerResult(records, results)

    def elect_leader(
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
                self.leader_acceptor(partition),
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
                self.elect_leader(name, tp.partition_id, ElectionType.UNCLEAN, records)
        return ControllerResult(records, len(records) >= max_elections)

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


def _assigned(directories: Iterable[uuid.UUID]) -> Iterator[uuid.UUID]:
    """The directories that name one, not a reserved id such as UNASSIGNED."""
    return (d for d in directories if not is_reserved_directory(d))
