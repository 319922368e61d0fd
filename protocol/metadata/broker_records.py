"""The metadata records of broker and controller registrations (KIP-631; KIP-841
controlled shutdown; KIP-858 log directories; KIP-919 controller registration), as
Kafka 4.0's schemas declare them.

    0  RegisterBrokerRecord            v0-3: BrokerId int32, IsMigratingZkBroker bool
                                       (v2+), IncarnationId uuid, BrokerEpoch int64,
                                       EndPoints []BrokerEndpoint, Features
                                       []BrokerFeature, Rack nullable string, Fenced bool
                                       (true), InControlledShutdown bool (v1+), LogDirs
                                       []uuid (v3+, tag 0)
       BrokerEndpoint                  Name string, Host string, Port uint16,
                                       SecurityProtocol int16
       BrokerFeature                   Name string, MinSupportedVersion int16,
                                       MaxSupportedVersion int16
    1  UnregisterBrokerRecord          v0: BrokerId int32, BrokerEpoch int64
    7  FenceBrokerRecord               v0: Id int32, Epoch int64
    8  UnfenceBrokerRecord             v0: Id int32, Epoch int64
    17 BrokerRegistrationChangeRecord  v0-2: BrokerId int32, BrokerEpoch int64, Fenced
                                       int8 (tag 0: 1 fenced, -1 unfenced, 0 no change),
                                       InControlledShutdown int8 (v1+, tag 1: 1 in
                                       controlled shutdown, 0 no change), LogDirs []uuid
                                       (v2+, tag 2)
    27 RegisterControllerRecord        v0: ControllerId int32, IncarnationId uuid,
                                       ZkMigrationReady bool, EndPoints
                                       []ControllerEndpoint, Features []ControllerFeature
                                       (both shaped as the broker's)

Defaults in parentheses; fields in schema order. Fence and Unfence records are what
metadata.version before 3.3-IV2 wrote; later ones write BrokerRegistrationChangeRecord.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tiercel.protocol.metadata.field_types import (
    BOOL,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    UINT16,
    UUID,
    UUID_ARRAY,
)
from tiercel.protocol.metadata.message_schema import (
    MetadataMessage,
    MetadataRecord,
    message_struct,
    metadata_record,
    schema_field,
    struct_array,
)

__all__ = [
    "BrokerEndpoint",
    "BrokerFeature",
    "BrokerRegistrationChangeRecord",
    "ControllerEndpoint",
    "ControllerFeature",
    "FenceBrokerRecord",
    "RegisterBrokerRecord",
    "RegisterControllerRecord",
    "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
]


@message_struct
@dataclass(frozen=True, kw_only=True)
class BrokerEndpoint(MetadataMessage):
    """A listener of a broker: its name, host and port, and its SecurityProtocol id."""

    name: str = schema_field(STRING)
    host: str = schema_field(STRING)
    port: int = schema_field(UINT16)
    security_protocol: int = schema_field(INT16)


@message_struct
@dataclass(frozen=True, kw_only=True)
class BrokerFeature(MetadataMessage):
    """A feature a broker supports, with the range of levels it supports."""

    name: str = schema_field(STRING)
    min_supported_version: int = schema_field(INT16)
    max_supported_version: int = schema_field(INT16)


@metadata_record(api_key=0, versions="0-3")
@dataclass(frozen=True, kw_only=True)
class RegisterBrokerRecord(MetadataRecord):
    """A broker's registration, with the epoch the controller gave it."""

    broker_id: int = schema_field(INT32)
    is_migrating_zk_broker: bool = schema_field(BOOL, "2+")
    incarnation_id: uuid.UUID = schema_field(UUID)
    broker_epoch: int = schema_field(INT64)
    end_points: tuple[BrokerEndpoint, ...] = schema_field(struct_array(BrokerEndpoint))
    features: tuple[BrokerFeature, ...] = schema_field(struct_array(BrokerFeature))
    rack: str | None = schema_field(STRING, nullable=True)
    fenced: bool = schema_field(BOOL, default=True)
    in_controlled_shutdown: bool = schema_field(BOOL, "1+")
    log_dirs: tuple[uuid.UUID, ...] = schema_field(UUID_ARRAY, "3+", tag=0)


@metadata_record(api_key=1, versions="0")
@dataclass(frozen=True, kw_only=True)
class UnregisterBrokerRecord(MetadataRecord):
    """A broker's registration removed."""

    broker_id: int = schema_field(INT32)
    broker_epoch: int = schema_field(INT64)


@metadata_record(api_key=7, versions="0")
@dataclass(frozen=True, kw_only=True)
class FenceBrokerRecord(MetadataRecord):
    """A broker fenced (it is removed from every ISR)."""

    id: int = schema_field(INT32)
    epoch: int = schema_field(INT64)


@metadata_record(api_key=8, versions="0")
@dataclass(frozen=True, kw_only=True)
class UnfenceBrokerRecord(MetadataRecord):
    """A broker unfenced."""

    id: int = schema_field(INT32)
    epoch: int = schema_field(INT64)


@metadata_record(api_key=17, versions="0-2")
@dataclass(frozen=True, kw_only=True)
class BrokerRegistrationChangeRecord(MetadataRecord):
    """A change to a registered broker of the given epoch: fencing, controlled shutdown,
    its available log directories."""

    broker_id: int = schema_field(INT32)
    broker_epoch: int = schema_field(INT64)
    fenced: int = schema_field(INT8, tag=0)
    in_controlled_shutdown: int = schema_field(INT8, "1+", tag=1)
    log_dirs: tuple[uuid.UUID, ...] = schema_field(UUID_ARRAY, "2+", tag=2)


@message_struct
@dataclass(frozen=True, kw_only=True)
class ControllerEndpoint(MetadataMessage):
    """A listener of a controller: its name, host and port, and its SecurityProtocol
    id."""

    name: str = schema_field(STRING)
    host: str = schema_field(STRING)
    port: int = schema_field(UINT16)
    security_protocol: int = schema_field(INT16)


@message_struct
@dataclass(frozen=True, kw_only=True)
class ControllerFeature(MetadataMessage):
    """A feature a controller supports, with the range of levels it supports."""

    name: str = schema_field(STRING)
    min_supported_version: int = schema_field(INT16)
    max_supported_version: int = schema_field(INT16)


@metadata_record(api_key=27, versions="0")
@dataclass(frozen=True, kw_only=True)
class RegisterControllerRecord(MetadataRecord):
    """A controller's registration (KIP-919): how brokers and tools reach it."""

    controller_id: int = schema_field(INT32)
    incarnation_id: uuid.UUID = schema_field(UUID)
    zk_migration_ready: bool = schema_field(BOOL)
    end_points: tuple[ControllerEndpoint, ...] = schema_field(struct_array(ControllerEndpoint))
    features: tuple[ControllerFeature, ...] = schema_field(struct_array(ControllerFeature))
