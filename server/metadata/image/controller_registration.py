"""A controller's registration in the metadata image (KIP-919; Kafka's
ControllerRegistration): how brokers and tools reach each controller, and the feature
levels it supports, which bound what the cluster may finalize."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tiercel.protocol.metadata.broker_records import (
    ControllerEndpoint,
    ControllerFeature,
    RegisterControllerRecord,
)
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.metadata.image.broker_registration import Endpoint, VersionRange
from tiercel.server.metadata.image.image_writer import ImageWriterOptions

__all__ = ["ControllerRegistration"]


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """A registered controller. A value; any thread."""

    id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool
    listeners: Mapping[str, Endpoint]
    supported_features: Mapping[str, VersionRange]

    @classmethod
    def from_record(cls, record: RegisterControllerRecord) -> ControllerRegistration:
        return cls(
            record.controller_id,
            record.incarnation_id,
            record.zk_migration_ready,
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
        )

    def to_record(self, options: ImageWriterOptions) -> ApiMessageAndVersion:
        record = RegisterControllerRecord(
            controller_id=self.id,
            incarnation_id=self.incarnation_id,
            zk_migration_ready=self.zk_migration_ready,
            end_points=tuple(
                ControllerEndpoint(
                    name=name, host=e.host, port=e.port, security_protocol=e.security_protocol
                )
                for name, e in self.listeners.items()
            ),
            features=tuple(
                ControllerFeature(
                    name=name, min_supported_version=r.min, max_supported_version=r.max
                )
                for name, r in self.supported_features.items()
            ),
        )
        version = options.metadata_version.register_controller_record_version()
        return ApiMessageAndVersion(record, version)
