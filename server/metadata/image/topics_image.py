"""The topics in the metadata image (Kafka's TopicImage and TopicsImage)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.topic_records import TopicRecord
from tiercel.server.metadata.image.image_writer import ImageWriter, ImageWriterOptions
from tiercel.server.metadata.image.partition_registration import PartitionRegistration

__all__ = ["TopicImage", "TopicsImage"]


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic: its name, id and partitions by partition id. A value; any thread."""

    name: str
    id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        """A TopicRecord, then a PartitionRecord per partition."""
        writer.write(ApiMessageAndVersion(TopicRecord(name=self.name, topic_id=self.id), 0))
        for partition_id, partition in self.partitions.items():
            writer.write(partition.to_record(self.id, partition_id, options))


@dataclass(frozen=True, slots=True)
class TopicsImage:
    """Every topic, by id and by name (the same TopicImage in both). A value; any
    thread."""

    EMPTY: ClassVar[TopicsImage]

    topics_by_id: Mapping[uuid.UUID, TopicImage]
    topics_by_name: Mapping[str, TopicImage]

    def is_empty(self) -> bool:
        return not self.topics_by_id

    def get_topic(self, key: uuid.UUID | str) -> TopicImage | None:
        """The topic of an id or a name."""
        if isinstance(key, str):
            return self.topics_by_name.get(key)
        return self.topics_by_id.get(key)

    def get_partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        topic = self.topics_by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        for topic in self.topics_by_id.values():
            topic.write(writer, options)


TopicsImage.EMPTY = TopicsImage(MappingProxyType({}), MappingProxyType({}))
