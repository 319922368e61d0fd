"""Builds the PartitionChangeRecord that moves a partition to a target ISR, replica set
or leader (Kafka's ``PartitionChangeBuilder``), or nothing when nothing changes.

``build`` does, in Kafka's order: complete a reassignment once every adding replica is
in the target ISR (removing replicas leave the replicas and the ISR; never if that would
empty the ISR: Kafka's ``PartitionReassignmentReplicas.maybeCompleteReassignment``);
elect a leader (`Election`); bump the leader epoch when replicas are removed, and before
metadata.version 3.6-IV0 when the ISR shrinks (KAFKA-15021); write the ISR unless it
would be empty (without ELR, KIP-966, the last ISR member stays in it so that it can lead
again when it returns); then the assignment and the leader recovery state.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Sequence

from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.metadata_version import MetadataVersion
from tiercel.protocol.metadata.topic_records import PartitionChangeRecord
from tiercel.server.metadata.image.partition_registration import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionRegistration,
)

__all__ = ["Election", "PartitionChangeBuilder"]


class Election(enum.Enum):
    """Kafka's ``PartitionChangeBuilder.Election``."""

    # The preferred (first) replica if it can lead, else as ONLINE.
    PREFERRED = "preferred"
    # Keep an acceptable leader in the ISR; otherwise the first acceptable ISR member.
    ONLINE = "online"
    # As ONLINE, then any acceptable replica (the ISR becomes just it; data may be lost).
    UNCLEAN = "unclean"


class PartitionChangeBuilder:
    """Pure: reads the partition, never changes it. ``is_acceptable_leader`` says whether
    a broker may lead now (Kafka's ``LeaderAcceptor``: active, not being removed)."""

    def __init__(
        self,
        partition: PartitionRegistration,
        topic_id: uuid.UUID,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
        metadata_version: MetadataVersion,
        default_dir: Callable[[int], uuid.UUID],
    ) -> None:
        self._partition = partition
        self._topic_id = topic_id
        self._partition_id = partition_id
        self._is_acceptable_leader = is_acceptable_leader
        self._metadata_version = metadata_version
        self._default_dir = default_dir
        self.election = Election.ONLINE
        self.target_isr: tuple[int, ...] = partition.isr
        self.target_replicas: tuple[int, ...] = partition.replicas
        self.target_removing: tuple[int, ...] = partition.removing_replicas
        self.target_adding: tuple[int, ...] = partition.adding_replicas
        self.target_leader_recovery_state: int = partition.leader_recovery_state
        # Each replica's directory, MIGRATING for a partition written without them
        # (Kafka's DirectoryId.createAssignmentMap).
        self._target_directories = {r: partition.directory(r) for r in partition.replicas}

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self.target_isr = tuple(isr)
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self.election = election
        return self

    def set_target_replicas(
        self, replicas: Sequence[int], removing: Sequence[int], adding: Sequence[int]
    ) -> PartitionChangeBuilder:
        self.target_replicas = tuple(replicas)
        self.target_removing = tuple(removing)
        self.target_adding = tuple(adding)
        return self

    def set_target_leader_recovery_state(self, state: int) -> PartitionChangeBuilder:
        self.target_leader_recovery_state = state
        return self

    def set_directory(self, broker_id: int, directory: uuid.UUID) -> PartitionChangeBuilder:
        """The directory ``broker_id`` reports its replica in (AssignReplicasToDirs)."""
        self._target_directories[broker_id] = directory
        return self

    def build(self) -> ApiMessageAndVersion | None:
        self._complete_reassignment_if_needed()
        leader, isr, recovery = self._try_election()
        partition = self._partition
        if leader == NO_LEADER_CHANGE and not set(partition.replicas) <= set(self.target_replicas):
            leader = partition.leader  # Removed replicas must see a new leader epoch.
        if isr is None and self.target_isr and self.target_isr != partition.isr:
            isr = self.target_isr
        if (
            self._metadata_version < MetadataVersion.IBP_3_6_IV0
            and leader == NO_LEADER_CHANGE
            and isr is not None
            and not set(partition.isr) <= set(isr)
        ):
            leader = partition.leader
        if (
            recovery is None
            and self.target_leader_recovery_state != partition.leader_recovery_state
        ):
            recovery = self.target_leader_recovery_state
        replicas = self.target_replicas if self.target_replicas != partition.replicas else None
        record = PartitionChangeRecord(
            partition_id=self._partition_id,
            topic_id=self._topic_id,
            isr=isr,
            leader=leader,
            replicas=replicas,
            removing_replicas=(
                self.target_removing
                if self.target_removing != partition.removing_replicas
                else None
            ),
            adding_replicas=(
                self.target_adding if self.target_adding != partition.adding_replicas else None
            ),
            leader_recovery_state=-1 if recovery is None else recovery,
            directories=self._directories(),
        )
        if record == PartitionChangeRecord(
            partition_id=self._partition_id, topic_id=self._topic_id
        ):
            return None
        return ApiMessageAndVersion(
            record, self._metadata_version.partition_change_record_version()
        )

    def _directories(self) -> tuple[uuid.UUID, ...] | None:
        # The replicas' directories when they change (KIP-858; Kafka's
        # setAssignmentChanges): a kept replica keeps its directory unless one was set,
        # a new one gets its broker's default (Kafka's DefaultDirProvider).
        if not self._metadata_version.is_directory_assignment_supported():
            return None
        directories = tuple(
            self._target_directories[r] if r in self._target_directories else self._default_dir(r)
            for r in self.target_replicas
        )
        partition = self._partition
        if directories == tuple(partition.directory(r) for r in partition.replicas):
            return None
        return directories

    def _complete_reassignment_if_needed(self) -> None:
        if not (self.target_removing or self.target_adding):
            return
        isr = tuple(r for r in self.target_isr if r not in self.target_removing)
        if not isr or not set(self.target_adding) <= set(isr):
            return
        self.target_replicas = tuple(
            r for r in self.target_replicas if r not in self.target_removing
        )
        self.target_isr = isr
        self.target_removing = ()
        self.target_adding = ()

    def _is_valid_new_leader(self, broker_id: int) -> bool:
        return broker_id in self.target_isr and self._is_acceptable_leader(broker_id)

    def _elect_leader(self) -> tuple[int, bool]:
        """(leader, unclean) as Kafka's ``electPreferredLeader``/``electAnyLeader``."""
        current = self._partition.leader
        if self.election == Election.PREFERRED and self.target_replicas:
            preferred = self.target_replicas[0]
            if self._is_valid_new_leader(preferred):
                return preferred, False
        if current != NO_LEADER and self._is_valid_new_leader(current):
            return current, False
        for replica in self.target_replicas:
            if self._is_valid_new_leader(replica):
                return replica, False
        if self.election == Election.UNCLEAN:
            for replica in self.target_replicas:
                if self._is_acceptable_leader(replica):
                    return replica, True
        return NO_LEADER, False

    def _try_election(self) -> tuple[int, tuple[int, ...] | None, int | None]:
        """(record leader, record ISR, record recovery state) of the election."""
        leader, unclean = self._elect_leader()
        if leader == self._partition.leader:
            return NO_LEADER_CHANGE, None, None
        if not unclean:
            return leader, None, None
        # An unclean leader is the whole ISR, and it recovers before it serves (KIP-704).
        recovering = LeaderRecoveryState.RECOVERING
        recovery = recovering if self._partition.leader_recovery_state != recovering else None
        return leader, (leader,), recovery
