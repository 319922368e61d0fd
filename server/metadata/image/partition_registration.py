"""A partition's state in the metadata image (Kafka's PartitionRegistration, with
LeaderRecoveryState, LeaderConstants and the reserved directory ids of DirectoryId).

A PartitionRecord gives the whole state; a PartitionChangeRecord changes some of it and
always bumps the partition epoch, and the leader epoch too when it names a leader
(Kafka's PartitionRegistration.merge). Directories hold the log directory of each
replica in replica order (KIP-858); a partition whose record has none, or only
MIGRATING ones, has MIGRATING for every replica (the directory is wherever the broker
finds the log). ELR and last known ELR (KIP-966) are empty unless a record set them.

A log replays one registration per PartitionRecord and PartitionChangeRecord, so they
are built without running the frozen dataclass's ``__init__``, which assigns each of
the eleven fields through ``object.__setattr__`` and cost more than the rest of the
replay: the fields are set in ``__dict__`` whole, as `message_schema` builds decoded
records (hence no ``__slots__``).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.topic_records import PartitionChangeRecord, PartitionRecord
from tiercel.server.metadata.image.errors import MetadataReplayError
from tiercel.server.metadata.image.image_writer import ImageWriterOptions

__all__ = [
    "LOST_DIRECTORY",
    "MIGRATING_DIRECTORY",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "UNASSIGNED_DIRECTORY",
    "LeaderRecoveryState",
    "PartitionRegistration",
]

NO_LEADER: Final = -1
NO_LEADER_CHANGE: Final = -2  # a PartitionChangeRecord's leader when it did not change

# DirectoryId's reserved ids: the replica's directory is whichever holds its log (written
# before directories were tracked), not chosen yet, or offline.
MIGRATING_DIRECTORY: Final = uuid.UUID(int=0)
UNASSIGNED_DIRECTORY: Final = uuid.UUID(int=1)
LOST_DIRECTORY: Final = uuid.UUID(int=2)


class LeaderRecoveryState(enum.IntEnum):
    """RECOVERED: the leader came from the ISR, or has recovered from an unclean
    election; RECOVERING: it was elected uncleanly and is recovering (KIP-704)."""

    RECOVERED = 0
    RECOVERING = 1

    @classmethod
    def of(cls, value: int) -> LeaderRecoveryState:
        try:
            return cls(value)
        except ValueError:
            raise MetadataReplayError(
                f"Value {value} is not a valid leader recovery state"
            ) from None


@dataclass(frozen=True)
class PartitionRegistration:
    """A partition's replicas (preferred first), their directories, ISR, reassignment
    in progress, leader and epochs, ELR. Invariant: ``directories`` has one entry per
    replica. A value; any thread."""

    replicas: tuple[int, ...]
    directories: tuple[uuid.UUID, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader: int
    leader_recovery_state: LeaderRecoveryState
    leader_epoch: int
    partition_epoch: int
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @classmethod
    def from_record(cls, record: PartitionRecord) -> PartitionRegistration:
        return _registration(
            record.replicas,
            _directories(record.directories, record.replicas),
            record.isr,
            record.removing_replicas,
            record.adding_replicas,
            record.leader,
            _leader_recovery_state(record.leader_recovery_state),
            record.leader_epoch,
            record.partition_epoch,
            record.eligible_leader_replicas or (),
            record.last_known_elr or (),
        )

    def merge(self, record: PartitionChangeRecord) -> PartitionRegistration:
        """This partition after ``record``: each field it sets replaces this one's; a
        new leader bumps the leader epoch; the partition epoch always goes up by one."""
        replicas = self.replicas
        directories = self.directories
        if record.replicas is not None:
            replicas = record.replicas
            directories = _directories(
                directories if record.directories is None else record.directories, replicas
            )
        elif record.directories is not None:
            directories = _directories(record.directories, replicas)
        if record.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = record.leader, self.leader_epoch + 1
        recovery = self.leader_recovery_state
        if record.leader_recovery_state != -1:
            recovery = _leader_recovery_state(record.leader_recovery_state)
        return _registration(
            replicas,
            directories,
            self.isr if record.isr is None else record.isr,
            self.removing_replicas
            if record.removing_replicas is None
            else record.removing_replicas,
            self.adding_replicas if record.adding_replicas is None else record.adding_replicas,
            leader,
            recovery,
            leader_epoch,
            self.partition_epoch + 1,
            self.elr
            if record.eligible_leader_replicas is None
            else record.eligible_leader_replicas,
            self.last_known_elr if record.last_known_elr is None else record.last_known_elr,
        )

    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def preferred_replica(self) -> int:
        """The first replica, NO_LEADER without any (Kafka's preferredReplica)."""
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def is_reassigning(self) -> bool:
        """Replicas are being added or removed (Kafka's
        PartitionReassignmentReplicas.isReassignmentInProgress)."""
        return bool(self.removing_replicas or self.adding_replicas)

    def directory(self, replica: int) -> uuid.UUID:
        """The log directory of ``replica``; ValueError if it is not a replica."""
        try:
            return self.directories[self.replicas.index(replica)]
        except ValueError:
            raise ValueError(f"Replica {replica} is not assigned to this partition.") from None

    def to_record(
        self, topic_id: uuid.UUID, partition_id: int, options: ImageWriterOptions
    ) -> ApiMessageAndVersion:
        """The PartitionRecord of this partition at the options' metadata.version
        (Kafka's PartitionRegistration.toRecord): ELR only from 4.0-IV1, and then only
        when not empty (they are tagged); directories from 3.7-IV2, before which any
        directory but MIGRATING is a loss."""
        version = options.metadata_version
        elr = last_known_elr = None
        if version.is_elr_supported():
            elr = self.elr or None
            last_known_elr = self.last_known_elr or None
        directories: tuple[uuid.UUID, ...] = ()
        if version.is_directory_assignment_supported():
            directories = self.directories
        elif any(d != MIGRATING_DIRECTORY for d in self.directories):
            options.handle_loss("the directory assignment state of one or more replicas")
        record = PartitionRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            replicas=self.replicas,
            isr=self.isr,
            removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas,
            leader=self.leader,
            leader_recovery_state=self.leader_recovery_state.value,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            directories=directories,
            eligible_leader_replicas=elr,
            last_known_elr=last_known_elr,
        )
        return ApiMessageAndVersion(record, version.partition_record_version())


_new = object.__new__
_set = object.__setattr__


def _registration(
    replicas: tuple[int, ...],
    directories: tuple[uuid.UUID, ...],
    isr: tuple[int, ...],
    removing_replicas: tuple[int, ...],
    adding_replicas: tuple[int, ...],
    leader: int,
    leader_recovery_state: LeaderRecoveryState,
    leader_epoch: int,
    partition_epoch: int,
    elr: tuple[int, ...],
    last_known_elr: tuple[int, ...],
) -> PartitionRegistration:
    """``PartitionRegistration(...)`` without its ``__init__`` (see the module's doc)."""
    partition: PartitionRegistration = _new(PartitionRegistration)
    _set(
        partition,
        "__dict__",
        {
            "replicas": replicas,
            "directories": directories,
            "isr": isr,
            "removing_replicas": removing_replicas,
            "adding_replicas": adding_replicas,
            "leader": leader,
            "leader_recovery_state": leader_recovery_state,
            "leader_epoch": leader_epoch,
            "partition_epoch": partition_epoch,
            "elr": elr,
            "last_known_elr": last_known_elr,
        },
    )
    return partition


_RECOVERY_STATES: Final = {state.value: state for state in LeaderRecoveryState}


def _leader_recovery_state(value: int) -> LeaderRecoveryState:
    """LeaderRecoveryState.of without the enum's own lookup, on the replay path."""
    state = _RECOVERY_STATES.get(value)
    return LeaderRecoveryState.of(value) if state is None else state


def _directories(
    directories: tuple[uuid.UUID, ...], replicas: tuple[int, ...]
) -> tuple[uuid.UUID, ...]:
    """Kafka's checkDirectories and defaultToMigrating: one directory per replica, or
    none (all MIGRATING) for a record written before directories were tracked."""
    if directories and len(directories) == len(replicas) and directories[0] != MIGRATING_DIRECTORY:
        return directories
    if not directories or all(d == MIGRATING_DIRECTORY for d in directories):
        return (MIGRATING_DIRECTORY,) * len(replicas)
    if len(directories) != len(replicas):
        raise MetadataReplayError(
            f"The lengths for replicas ({len(replicas)}) and directories "
            f"({len(directories)}) do not match."
        )
    return directories
