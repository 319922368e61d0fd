"""The client quotas of the metadata image, per entity, and changes to them (Kafka's
ClientQuotaImage, ClientQuotasImage and their deltas; KIP-546).

An entity is a combination of a user, a client id or an IP, each named or the type's
default (a null name); its quotas are keys such as ``producer_byte_rate``. An entity
whose last quota is removed disappears.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from tiercel.protocol.metadata.config_records import ClientQuotaRecord, EntityData
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.metadata.image.image_writer import ImageWriter, ImageWriterOptions
from tiercel.server.metadata.image.map_changes import apply_changes

__all__ = [
    "ClientQuotaDelta",
    "ClientQuotaEntity",
    "ClientQuotaImage",
    "ClientQuotasDelta",
    "ClientQuotasImage",
]


@dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """An entity as (entity type, name or None) pairs, one per type, sorted by type
    (Kafka's ClientQuotaEntity, a map from type to name)."""

    entries: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, entity: tuple[EntityData, ...]) -> ClientQuotaEntity:
        entries = {data.entity_type: data.entity_name for data in entity}
        return cls(tuple(sorted(entries.items(), key=lambda entry: entry[0])))

    def to_data(self) -> tuple[EntityData, ...]:
        return tuple(EntityData(entity_type=t, entity_name=name) for t, name in self.entries)


@dataclass(frozen=True, slots=True)
class ClientQuotaImage:
    """One entity's quotas by key. A value; any thread."""

    quotas: Mapping[str, float]

    def write(
        self, entity: ClientQuotaEntity, writer: ImageWriter, options: ImageWriterOptions
    ) -> None:
        for key, value in self.quotas.items():
            record = ClientQuotaRecord(entity=entity.to_data(), key=key, value=value, remove=False)
            writer.write(ApiMessageAndVersion(record, 0))


@dataclass(frozen=True, slots=True)
class ClientQuotasImage:
    """The quotas of every entity that has any. A value; any thread."""

    EMPTY: ClassVar[ClientQuotasImage]

    entities: Mapping[ClientQuotaEntity, ClientQuotaImage]

    def is_empty(self) -> bool:
        return not self.entities

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        for entity, image in self.entities.items():
            image.write(entity, writer, options)


ClientQuotasImage.EMPTY = ClientQuotasImage(MappingProxyType({}))


class ClientQuotaDelta:
    """Changes to one entity's quotas: the new value, None for a removal."""

    def __init__(self, image: ClientQuotaImage) -> None:
        self.image = image
        self.changes: dict[str, float | None] = {}

    def replay(self, record: ClientQuotaRecord) -> None:
        self.changes[record.key] = None if record.remove else record.value

    def finish_snapshot(self) -> None:
        for key in self.image.quotas:
            self.changes.setdefault(key, None)

    def apply(self) -> ClientQuotaImage:
        return ClientQuotaImage(apply_changes(self.image.quotas, self.changes))


class ClientQuotasDelta:
    """Changes to the quotas of any entity. Not thread-safe: one replayer builds a
    delta."""

    def __init__(self, image: ClientQuotasImage) -> None:
        self.image = image
        self.changes: dict[ClientQuotaEntity, ClientQuotaDelta] = {}

    def _delta(self, entity: ClientQuotaEntity) -> ClientQuotaDelta:
        delta = self.changes.get(entity)
        if delta is None:
            image = self.image.entities.get(entity) or ClientQuotaImage(MappingProxyType({}))
            delta = self.changes[entity] = ClientQuotaDelta(image)
        return delta

    def replay(self, record: ClientQuotaRecord) -> None:
        self._delta(ClientQuotaEntity.of(record.entity)).replay(record)

    def finish_snapshot(self) -> None:
        for entity in self.image.entities:
            self._delta(entity).finish_snapshot()

    def apply(self) -> ClientQuotasImage:
        entities = dict(self.image.entities)
        for entity, delta in self.changes.items():
            image = delta.apply()
            if image.quotas:
                entities[entity] = image
            else:
                entities.pop(entity, None)
        return ClientQuotasImage(MappingProxyType(entities))
