"""A broker's registration in the metadata image (Kafka's BrokerRegistration, with the
Endpoint and VersionRange it is made of).

A broker registers with a new incarnation id each time its process starts and gets a
new broker epoch; it is fenced until the controller unfences it (caught up with the
metadata log, KIP-631), may be in controlled shutdown (KIP-841), and lists the log
directories it has online (KIP-858). Changes after registration come as
BrokerRegistrationChangeRecord (or, before 3.3-IV2, Fence/UnfenceBrokerRecord) naming
the registered epoch.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final

from tiercel.protocol.metadata.broker_records import (
    BrokerEndpoint,
    BrokerFeature,
    RegisterBrokerRecord,
)
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.metadata.image.image_writer import ImageWriterOptions
from tiercel.server.metadata.image.partition_registration import (
    LOST_DIRECTORY,
    MIGRATING_DIRECTORY,
    UNASSIGNED_DIRECTORY,
)

__all__ = ["BrokerRegistration", "Endpoint", "VersionRange"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A named listener: its SecurityProtocol id (0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT,
    3 SASL_SSL), host and port (Kafka's Endpoint)."""

    listener_name: str
    security_protocol: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class VersionRange:
    """The feature levels a node supports, both ends included."""

    min: int
    max: int

    def contains(self, level: int) -> bool:
        return self.min <= level <= self.max


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker. ``directories`` are in Kafka's Uuid order (the constructor of
    Kafka's BrokerRegistration sorts them), so a snapshot lists them as Kafka's would.
    A value; any thread."""

    id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: Mapping[str, Endpoint]
    supported_features: Mapping[str, VersionRange]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    is_migrating_zk_broker: bool = False
    directories: tuple[uuid.UUID, ...] = ()

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> BrokerRegistration:
        return cls(
            record.broker_id,
            record.broker_epoch,
            record.incarnation_id,
            MappingProxyType(
                {
                    e.name: Endpoint(e.name, e.security_protocol, e.host, e.port)
                    for e in record.end_points
                }
            ),
            MappingProxyType(
                {
                    f.name: VersionRange(f.min_supported_version, f.max_supported_version)
                    for f in record.features
                }
            ),
            record.rack,
            record.fenced,
            record.in_controlled_shutdown,
            record.is_migrating_zk_broker,
            _sorted_directories(record.log_dirs),
        )

    def clone_with(
        self,
        fenced: bool | None = None,
        in_controlled_shutdown: bool | None = None,
        directories: tuple[uuid.UUID, ...] | None = None,
    ) -> BrokerRegistration:
        """This registration with the changes given (None: unchanged), itself when
        nothing changes (Kafka's cloneWith)."""
        changed = replace(
            self,
            fenced=self.fenced if fenced is None else fenced,
            in_controlled_shutdown=(
                self.in_controlled_shutdown
                if in_controlled_shutdown is None
                else in_controlled_shutdown
            ),
            directories=(
                self.directories if directories is None else _sorted_directories(directories)
            ),
        )
        return self if changed == self else changed

    def has_online_dir(self, directory: uuid.UUID) -> bool:
        """Whether a replica in ``directory`` is on a working disk (Kafka's
        hasOnlineDir, DirectoryId.isOnline): MIGRATING and UNASSIGNED ones are taken to
        be, a LOST one is not, and a broker that registered no directories (before
        3.7-IV2) halts once none is left."""
        if directory in (MIGRATING_DIRECTORY, UNASSIGNED_DIRECTORY):
            return True
        if directory == LOST_DIRECTORY:
            return False
        return not self.directories or directory in self.directories

    def to_record(self, options: ImageWriterOptions) -> ApiMessageAndVersion:
        """The RegisterBrokerRecord of this registration (Kafka's toRecord): what the
        options' metadata.version cannot hold (migration state before 3.4-IV0, log
        directories before 3.7-IV2) is a loss."""
        version = options.metadata_version
        if self.is_migrating_zk_broker and not version.is_migration_supported():
            options.handle_loss("the isMigratingZkBroker state of one or more brokers")
        if self.directories and not version.is_directory_assignment_supported():
            options.handle_loss("the online log directories of one or more brokers")
        record = RegisterBrokerRecord(
            broker_id=self.id,
            is_migrating_zk_broker=self.is_migrating_zk_broker and version.is_migration_supported(),
            incarnation_id=self.incarnation_id,
            broker_epoch=self.epoch,
            end_points=tuple(
                BrokerEndpoint(
                    name=name, host=e.host, port=e.port, security_protocol=e.security_protocol
                )
                for name, e in self.listeners.items()
            ),
            features=tuple(
                BrokerFeature(name=name, min_supported_version=r.min, max_supported_version=r.max)
                for name, r in self.supported_features.items()
            ),
            rack=self.rack,
            fenced=self.fenced,
            in_controlled_shutdown=self.in_controlled_shutdown,
            log_dirs=self.directories if version.is_directory_assignment_supported() else (),
        )
        return ApiMessageAndVersion(record, version.register_broker_record_version())


def _sorted_directories(directories: tuple[uuid.UUID, ...]) -> tuple[uuid.UUID, ...]:
    """Sorted as Kafka's Uuid.compareTo sorts: by the most, then the least significant
    64 bits, each a signed Java long (so a uuid with the top bit set sorts first)."""
    return tuple(sorted(directories, key=_java_uuid_order))


def _java_uuid_order(directory: uuid.UUID) -> tuple[int, int]:
    value = directory.int
    return _signed_long(value >> 64), _signed_long(value & _LONG_MASK)


_LONG_MASK: Final = (1 << 64) - 1


def _signed_long(bits: int) -> int:
    return bits - (1 << 64) if bits >> 63 else bits
