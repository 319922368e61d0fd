"""A registered broker as the controller knows it (Kafka's ``BrokerRegistration``) and
what a broker asks when it registers (BrokerRegistrationRequest's fields)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from tiercel.protocol.metadata.broker_records import (
    BrokerEndpoint,
    BrokerFeature,
    RegisterBrokerRecord,
)
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.metadata_version import MetadataVersion
from tiercel.server.metadata.image.broker_registration import VersionRange
from tiercel.server.metadata.image.partition_registration import (
    LOST_DIRECTORY,
    MIGRATING_DIRECTORY,
    UNASSIGNED_DIRECTORY,
)

__all__ = ["BrokerRegistration", "BrokerRegistrationRequest", "is_reserved_directory"]

# DirectoryId's first 100 ids name no directory (MIGRATING, UNASSIGNED, LOST, ...).
_RESERVED_DIRECTORY_IDS: Final = 100


def is_reserved_directory(directory: uuid.UUID) -> bool:
    """Kafka's ``DirectoryId.reserved``."""
    return directory.int < _RESERVED_DIRECTORY_IDS


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    """BrokerRegistration (62)'s request, as the controller's command takes it."""

    broker_id: int
    cluster_id: str
    incarnation_id: uuid.UUID
    listeners: tuple[BrokerEndpoint, ...]
    features: Mapping[str, VersionRange]
    rack: str | None = None
    is_migrating_zk_broker: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """Invariant: ``epoch`` is the offset of the RegisterBrokerRecord that created this
    incarnation (Kafka's broker epoch). A value; safe anywhere."""

    id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: tuple[BrokerEndpoint, ...]
    supported_features: Mapping[str, VersionRange]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    log_dirs: tuple[uuid.UUID, ...]

    @property
    def is_active(self) -> bool:
        """May lead and receive new replicas (Kafka's ``ClusterControlManager.isActive``)."""
        return not self.fenced and not self.in_controlled_shutdown

    @staticmethod
    def from_record(record: RegisterBrokerRecord) -> BrokerRegistration:
        return BrokerRegistration(
            id=record.broker_id,
            epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            listeners=record.end_points,
            supported_features={
                f.name: VersionRange(f.min_supported_version, f.max_supported_version)
                for f in record.features
            },
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            log_dirs=record.log_dirs,
        )

    def has_online_dir(self, directory: uuid.UUID) -> bool:
        """Whether a replica in ``directory`` is on a working disk (Kafka's
        ``DirectoryId.isOnline``): MIGRATING and UNASSIGNED replicas are assumed to be,
        a LOST one is not, and a broker that registered no directories (before
        metadata.version 3.7-IV2) is assumed to halt once none is left."""
        if directory in (MIGRATING_DIRECTORY, UNASSIGNED_DIRECTORY):
            return True
        if directory == LOST_DIRECTORY:
            return False
        return not self.log_dirs or directory in self.log_dirs

    def directory_intersection(self, others: Sequence[uuid.UUID]) -> tuple[uuid.UUID, ...]:
        """This broker's online directories among ``others``, in registration order."""
        return tuple(d for d in self.log_dirs if d in others)

    def directory_difference(self, others: Sequence[uuid.UUID]) -> tuple[uuid.UUID, ...]:
        """This broker's online directories not among ``others``, in registration order."""
        return tuple(d for d in self.log_dirs if d not in others)

    def cloned_with(
        self,
        fenced: bool | None = None,
        in_controlled_shutdown: bool | None = None,
        log_dirs: tuple[uuid.UUID, ...] | None = None,
    ) -> BrokerRegistration:
        """Kafka's ``BrokerRegistration.cloneWith``: None keeps a field."""
        return replace(
            self,
            fenced=self.fenced if fenced is None else fenced,
            in_controlled_shutdown=(
                self.in_controlled_shutdown
                if in_controlled_shutdown is None
                else in_controlled_shutdown
            ),
            log_dirs=self.log_dirs if log_dirs is None else log_dirs,
        )

    def to_record(self, version: MetadataVersion) -> ApiMessageAndVersion:
        """The RegisterBrokerRecord that recreates this registration (Kafka's
        ``BrokerRegistration.toRecord``), for snapshots."""
        record_version = version.register_broker_record_version()
        record = RegisterBrokerRecord(
            broker_id=self.id,
            incarnation_id=self.incarnation_id,
            broker_epoch=self.epoch,
            end_points=self.listeners,
            features=tuple(
                BrokerFeature(name=n, min_supported_version=r.min, max_supported_version=r.max)
                for n, r in sorted(self.supported_features.items())
            ),
            rack=self.rack,
            fenced=self.fenced,
            in_controlled_shutdown=self.in_controlled_shutdown,
            log_dirs=self.log_dirs if record_version >= 3 else (),
        )
        return ApiMessageAndVersion(record, record_version)
