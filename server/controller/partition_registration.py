"""A partition as the controller's records describe it (Kafka's
``PartitionRegistration``): a PartitionRecord, then PartitionChangeRecords merged in."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Final

from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.metadata_version import MetadataVersion
from tiercel.protocol.metadata.topic_records import PartitionChangeRecord, PartitionRecord
from tiercel.server.metadata.image.partition_registration import MIGRATING_DIRECTORY

__all__ = [
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "RECOVERED",
    "RECOVERING",
    "PartitionRegistration",
]

NO_LEADER: Final = -1
# PartitionChangeRecord.Leader when the leader does not change (Kafka's NO_LEADER_CHANGE).
NO_LEADER_CHANGE: Final = -2
# LeaderRecoveryState (KIP-704): RECOVERING after an unclean election until the new
# leader reports the partition RECOVERED through AlterPartition.
RECOVERED: Final = 0
RECOVERING: Final = 1


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """Invariants, as the controller keeps them: ``isr`` and ``leader`` are within
    ``replicas``; ``isr`` is empty only if ``leader`` is NO_LEADER (ELR, which would allow
    it, is not enabled); every change bumps ``partition_epoch``, a leader change
    ``leader_epoch`` too. A value; safe anywhere."""

    replicas: tuple[int, ...]
    directories: tuple[uuid.UUID, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader: int
    leader_recovery_state: int
    leader_epoch: int
    partition_epoch: int

    @staticmethod
    def from_record(record: PartitionRecord) -> PartitionRegistration:
        return PartitionRegistration(
            replicas=record.replicas,
            directories=record.directories,
            isr=record.isr,
            removing_replicas=record.removing_replicas,
            adding_replicas=record.adding_replicas,
            leader=record.leader,
            leader_recovery_state=record.leader_recovery_state,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
        )

    @property
    def is_reassigning(self) -> bool:
        return bool(self.removing_replicas or self.adding_replicas)

    @property
    def preferred_replica(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    def directory(self, replica: int) -> uuid.UUID:
        """The directory of ``replica``'s log (Kafka's ``PartitionRegistration.directory``):
        MIGRATING for a partition written before directories were tracked."""
        if not self.directories:
            return MIGRATING_DIRECTORY
        try:
            return self.directories[self.replicas.index(replica)]
        except ValueError:
            raise ValueError(f"Replica {replica} is not assigned to this partition.") from None

    def merge(self, record: PartitionChangeRecord) -> PartitionRegistration:
        """Kafka's ``PartitionRegistration.merge``: the partition epoch always moves on,
        the leader epoch when the record names a leader (even the same one)."""
        leader_changed = record.leader != NO_LEADER_CHANGE
        replicas = record.replicas if record.replicas is not None else self.replicas
        directories = record.directories if record.directories is not None else self.directories
        return replace(
            self,
            replicas=replicas,
            directories=directories,
            isr=record.isr if record.isr is not None else self.isr,
            removing_replicas=(
                record.removing_replicas
                if record.removing_replicas is not None
                else self.removing_replicas
            ),
            adding_replicas=(
                record.adding_replicas
                if record.adding_replicas is not None
                else self.adding_replicas
            ),
            leader=record.leader if leader_changed else self.leader,
            leader_recovery_state=(
                record.leader_recovery_state
                if record.leader_recovery_state != -1
                else self.leader_recovery_state
            ),
            leader_epoch=self.leader_epoch + 1 if leader_changed else self.leader_epoch,
            partition_epoch=self.partition_epoch + 1,
        )

    def to_record(
        self, topic_id: uuid.UUID, partition_id: int, version: MetadataVersion
    ) -> ApiMessageAndVersion:
        """The PartitionRecord that recreates this partition (Kafka's ``toRecord``)."""
        record_version = version.partition_record_version()
        record = PartitionRecord(
            partition_id=partition_id,
            topic_id=topic_id,
            replicas=self.replicas,
            isr=self.isr,
            removing_replicas=self.removing_replicas,
            adding_replicas=self.adding_replicas,
            leader=self.leader,
            leader_recovery_state=self.leader_recovery_state,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            directories=self.directories if record_version >= 1 else (),
        )
        return ApiMessageAndVersion(record, record_version)
