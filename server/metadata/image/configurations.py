"""The dynamic configs of the metadata image, per resource, and changes to them (Kafka's
ConfigResource, ConfigurationImage, ConfigurationsImage and their deltas).

Only the configs set for a resource are here, not defaults: a topic's config map holds
its overrides; a resource whose last config is deleted disappears. Deleting a topic
deletes its configs with it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from tiercel.protocol.metadata.config_records import ConfigRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.metadata.image.image_writer import ImageWriter, ImageWriterOptions
from tiercel.server.metadata.image.map_changes import apply_changes

__all__ = [
    "ConfigResource",
    "ConfigResourceType",
    "ConfigurationDelta",
    "ConfigurationImage",
    "ConfigurationsDelta",
    "ConfigurationsImage",
]


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type, by id."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32

    @classmethod
    def for_id(cls, type_id: int) -> ConfigResourceType:
        """An id Kafka does not know is UNKNOWN (ConfigResource.Type.forId)."""
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """What a config is for: a topic by name, a broker by id ("" for the cluster-wide
    default)..."""

    type: ConfigResourceType
    name: str


@dataclass(frozen=True, slots=True)
class ConfigurationImage:
    """The configs set for one resource. A value; any thread."""

    resource: ConfigResource
    data: Mapping[str, str]

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        for name, value in self.data.items():
            record = ConfigRecord(
                resource_type=self.resource.type,
                resource_name=self.resource.name,
                name=name,
                value=value,
            )
            writer.write(ApiMessageAndVersion(record, 0))


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    """The configs of every resource that has any. A value; any thread."""

    EMPTY: ClassVar[ConfigurationsImage]

    resource_data: Mapping[ConfigResource, ConfigurationImage]

    def is_empty(self) -> bool:
        return not self.resource_data

    def config_map_for_resource(self, resource: ConfigResource) -> Mapping[str, str]:
        """The configs set for ``resource`` (no defaults), empty if none."""
        image = self.resource_data.get(resource)
        return MappingProxyType({}) if image is None else image.data

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        for image in self.resource_data.values():
            image.write(writer, options)


ConfigurationsImage.EMPTY = ConfigurationsImage(MappingProxyType({}))


class ConfigurationDelta:
    """Changes to one resource's configs: the new value, None for a deletion."""

    def __init__(self, image: ConfigurationImage) -> None:
        self.image = image
        self.changes: dict[str, str | None] = {}

    def replay(self, record: ConfigRecord) -> None:
        self.changes[record.name] = record.value

    def delete_all(self) -> None:
        self.changes = dict.fromkeys(self.image.data)

    def finish_snapshot(self) -> None:
        for name in self.image.data:
            self.changes.setdefault(name, None)

    def apply(self) -> ConfigurationImage:
        return ConfigurationImage(self.image.resource, apply_changes(self.image.data, self.changes))


class ConfigurationsDelta:
    """Changes to the configs of any resource. Not thread-safe: one replayer builds a
    delta."""

    def __init__(self, image: ConfigurationsImage) -> None:
        self.image = image
        self.changes: dict[ConfigResource, ConfigurationDelta] = {}

    def _delta(self, resource: ConfigResource) -> ConfigurationDelta:
        delta = self.changes.get(resource)
        if delta is None:
            image = self.image.resource_data.get(resource)
            if image is None:
                image = ConfigurationImage(resource, MappingProxyType({}))
            delta = self.changes[resource] = ConfigurationDelta(image)
        return delta

    def replay(self, record: ConfigRecord) -> None:
        resource = ConfigResource(
            ConfigResourceType.for_id(record.resource_type), record.resource_name
        )
        self._delta(resource).replay(record)

    def remove_topic(self, topic_name: str) -> None:
        """A deleted topic's configs go with it (Kafka's replay(RemoveTopicRecord)),
        those set in this delta too: Kafka's drops only the image's, which would leave a
        topic created, configured and deleted within one delta with orphan configs."""
        resource = ConfigResource(ConfigResourceType.TOPIC, topic_name)
        if resource in self.image.resource_data or resource in self.changes:
            self._delta(resource).delete_all()

    def finish_snapshot(self) -> None:
        for resource in self.image.resource_data:
            self._delta(resource).finish_snapshot()

    def apply(self) -> ConfigurationsImage:
        data = dict(self.image.resource_data)
        for resource, delta in self.changes.items():
            image = delta.apply()
            if image.data:
                data[resource] = image
            else:
                data.pop(resource, None)
        return ConfigurationsImage(MappingProxyType(data))
