"""The metadata records of dynamic configs and client quotas, as Kafka 4.0's schemas
declare them.

    4  ConfigRecord        v0: ResourceType int8 (ConfigResource.Type id), ResourceName
                           string, Name string, Value nullable string (null: deleted)
    14 ClientQuotaRecord   v0: Entity []EntityData, Key string, Value float64, Remove bool
       EntityData          EntityType string ("user", "client-id", "ip"), EntityName
                           nullable string (null: the entity type's default)
"""

from __future__ import annotations

from dataclasses import dataclass

from tiercel.protocol.metadata.field_types import BOOL, FLOAT64, INT8, STRING
from tiercel.protocol.metadata.message_schema import (
    MetadataMessage,
    MetadataRecord,
    message_struct,
    metadata_record,
    schema_field,
    struct_array,
)

__all__ = ["ClientQuotaRecord", "ConfigRecord", "EntityData"]


@metadata_record(api_key=4, versions="0")
@dataclass(frozen=True, kw_only=True)
class ConfigRecord(MetadataRecord):
    """One config key of a resource set (or, with a null value, deleted)."""

    resource_type: int = schema_field(INT8)
    resource_name: str = schema_field(STRING)
    name: str = schema_field(STRING)
    value: str | None = schema_field(STRING, nullable=True)


@message_struct
@dataclass(frozen=True, kw_only=True)
class EntityData(MetadataMessage):
    """One component of a quota entity."""

    entity_type: str = schema_field(STRING)
    entity_name: str | None = schema_field(STRING, nullable=True)


@metadata_record(api_key=14, versions="0")
@dataclass(frozen=True, kw_only=True)
class ClientQuotaRecord(MetadataRecord):
    """One quota of an entity set to a value, or removed."""

    entity: tuple[EntityData, ...] = schema_field(struct_array(EntityData))
    key: str = schema_field(STRING)
    value: float = schema_field(FLOAT64)
    remove: bool = schema_field(BOOL)
