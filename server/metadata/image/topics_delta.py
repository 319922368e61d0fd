"""Changes to the topics of a metadata image (Kafka's TopicDelta and TopicsDelta), and
what they change for the replicas of one broker (``local_changes``).

A delta starts from an image, replays records, and ``apply`` gives the next image; the
image it started from is never modified. A topic created and deleted within one delta
leaves no trace; a topic deleted and then created again under the same name (a new id)
appears as the new topic. Not thread-safe: one replayer builds a delta.
"""

from __future__ import annotations

import uuid
from types import MappingProxyType

from tiercel.protocol.metadata.topic_records import (
    ClearElrRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tiercel.server.metadata.image.errors import MetadataReplayError
from tiercel.server.metadata.image.local_replica_changes import LocalReplicaChanges, PartitionInfo
from tiercel.server.metadata.image.partition_registration import PartitionRegistration
from tiercel.server.metadata.image.topics_image import TopicImage, TopicsImage
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition

__all__ = ["TopicDelta", "TopicsDelta"]


class _Changes:
    """LocalReplicaChanges being gathered."""

    def __init__(self) -> None:
        self.deletes: set[TopicPartition] = set()
        self.elected_leaders: dict[TopicPartition, PartitionInfo] = {}
        self.leaders: dict[TopicPartition, PartitionInfo] = {}
        self.followers: dict[TopicPartition, PartitionInfo] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.directory_ids: dict[TopicIdPartition, uuid.UUID] = {}

    def freeze(self) -> LocalReplicaChanges:
        return LocalReplicaChanges(
            frozenset(self.deletes),
            MappingProxyType(self.elected_leaders),
            MappingProxyType(self.leaders),
            MappingProxyType(self.followers),
            MappingProxyType(self.topic_ids),
            MappingProxyType(self.directory_ids),
        )


class TopicDelta:
    """Changes to one topic's partitions: each changed partition's new registration."""

    def __init__(self, image: TopicImage) -> None:
        self.image = image
        self.partition_changes: dict[int, PartitionRegistration] = {}

    @property
    def name(self) -> str:
        return self.image.name

    @property
    def id(self) -> uuid.UUID:
        return self.image.id

    def replay_partition(self, record: PartitionRecord) -> None:
        self.partition_changes[record.partition_id] = PartitionRegistration.from_record(record)

    def replay_partition_change(self, record: PartitionChangeRecord) -> None:
        partition_id = record.partition_id
        partition = self.partition_changes.get(partition_id)
        if partition is None:
            partition = self.image.partitions.get(partition_id)
            if partition is None:
                raise MetadataReplayError(
                    f"Unable to find partition {record.topic_id}:{partition_id}"
                )
        self.partition_changes[partition_id] = partition.merge(record)

    def clear_elr(self) -> None:
        """Empties the ELR and last known ELR of every partition that has any, as a
        PartitionChangeRecord setting both to [] would (ClearElrRecord, KIP-966)."""
        partitions = {**self.image.partitions, **self.partition_changes}
        for partition_id, partition in partitions.items():
            if partition.elr or partition.last_known_elr:
                change = PartitionChangeRecord(
                    partition_id=partition_id,
                    topic_id=self.id,
                    eligible_leader_replicas=(),
                    last_known_elr=(),
                )
                self.partition_changes[partition_id] = partition.merge(change)

    def new_partitions(self) -> dict[int, PartitionRegistration]:
        """The partitions the image did not have."""
        return {
            pid: p for pid, p in self.partition_changes.items() if pid not in self.image.partitions
        }

    def apply(self) -> TopicImage:
        partitions = dict(self.image.partitions)
        partitions.update(self.partition_changes)
        return TopicImage(self.image.name, self.image.id, MappingProxyType(partitions))

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        changes = _Changes()
        self.gather_local_changes(broker_id, changes)
        return changes.freeze()

    def gather_local_changes(self, broker_id: int, changes: _Changes) -> None:
        """Kafka's TopicDelta.localChanges: a changed partition is a delete if the broker
        was a replica and is not any more, a leader or follower change if the broker is
        a replica and the partition epoch moved (or the partition is new)."""
        name, topic_id, image_partitions = self.image.name, self.image.id, self.image.partitions
        for partition_id, partition in self.partition_changes.items():
            previous = image_partitions.get(partition_id)
            if broker_id not in partition.replicas:
                if previous is not None and broker_id in previous.replicas:
                    changes.deletes.add(TopicPartition(name, partition_id))
                continue
            tp = TopicPartition(name, partition_id)
            if previous is None or previous.partition_epoch != partition.partition_epoch:
                info = PartitionInfo(topic_id, partition)
                if partition.leader == broker_id:
                    changes.leaders[tp] = info
                    if previous is None or previous.leader_epoch != partition.leader_epoch:
                        changes.elected_leaders[tp] = info
                else:
                    changes.followers[tp] = info
                changes.topic_ids.setdefault(name, topic_id)
            # As TopicsDelta.localChanges documents it: directories that changed or are
            # "newly added to the broker". (TopicDelta's own guard calls
            # prevPartition.directory(brokerId), which throws for a replica that a
            # reassignment adds, and so skips it.)
            directory = partition.directory(broker_id)
            if (
                previous is None
                or broker_id not in previous.replicas
                or previous.directory(broker_id) != directory
            ):
                changes.directory_ids[TopicIdPartition(topic_id, tp)] = directory


class TopicsDelta:
    """Changes to the topics: created or changed topics, and deleted ones."""

    def __init__(self, image: TopicsImage) -> None:
        self.image = image
        # Topics created or changed; a deleted topic is not here.
        self.changed_topics: dict[uuid.UUID, TopicDelta] = {}
        # Topics of the image that were deleted.
        self.deleted_topic_ids: set[uuid.UUID] = set()
        self.created_topics: dict[str, uuid.UUID] = {}

    def replay_topic(self, record: TopicRecord) -> None:
        topic = TopicImage(record.name, record.topic_id, MappingProxyType({}))
        self.changed_topics[record.topic_id] = TopicDelta(topic)
        self.created_topics[record.name] = record.topic_id

    def replay_partition(self, record: PartitionRecord) -> None:
        self._topic_delta(record.topic_id).replay_partition(record)

    def replay_partition_change(self, record: PartitionChangeRecord) -> None:
        self._topic_delta(record.topic_id).replay_partition_change(record)

    def replay_clear_elr(self, record: ClearElrRecord) -> None:
        """Kafka's TopicsDelta.replay(ClearElrRecord): the named topic, created in this
        delta or of the image, or (empty name) every topic of the image. A topic deleted
        in this delta is skipped: giving it a TopicDelta again would bring it back."""
        if not record.topic_name:
            for image_topic_id in self.image.topics_by_id:
                if image_topic_id not in self.deleted_topic_ids:
                    self._topic_delta(image_topic_id).clear_elr()
            return
        topic_id = self.created_topics.get(record.topic_name)
        if topic_id is None or topic_id not in self.changed_topics:
            topic = self.image.topics_by_name.get(record.topic_name)
            topic_id = None if topic is None or topic.id in self.deleted_topic_ids else topic.id
        if topic_id is None:
            raise MetadataReplayError(
                f"Unable to clear elr for topic with name {record.topic_name}: no such topic found."
            )
        self._topic_delta(topic_id).clear_elr()

    def replay_remove_topic(self, record: RemoveTopicRecord) -> str:
        """Deletes a topic; returns its name (whose configs go with it)."""
        delta = self.changed_topics.pop(record.topic_id, None)
        if delta is not None:
            if record.topic_id in self.image.topics_by_id:
                self.deleted_topic_ids.add(record.topic_id)
            return delta.name
        topic = self.image.topics_by_id.get(record.topic_id)
        if topic is None:
            raise MetadataReplayError(
                f"Unable to delete topic with id {record.topic_id}: no such topic found."
            )
        self.deleted_topic_ids.add(record.topic_id)
        return topic.name

    def _topic_delta(self, topic_id: uuid.UUID) -> TopicDelta:
        delta = self.changed_topics.get(topic_id)
        if delta is None:
            topic = self.image.topics_by_id.get(topic_id)
            if topic is None:
                raise MetadataReplayError(f"Unable to find topic with id {topic_id}")
            delta = self.changed_topics[topic_id] = TopicDelta(topic)
        return delta

    def finish_snapshot(self) -> None:
        """After a snapshot's records: every topic the snapshot did not name is gone."""
        for topic_id in self.image.topics_by_id:
            if topic_id not in self.changed_topics:
                self.deleted_topic_ids.add(topic_id)

    def apply(self) -> TopicsImage:
        by_id = dict(self.image.topics_by_id)
        by_name = dict(self.image.topics_by_name)
        for topic_id in self.deleted_topic_ids:
            deleted = by_id.pop(topic_id)
            del by_name[deleted.name]
        for topic_id, delta in self.changed_topics.items():
            topic = delta.apply()
            by_id[topic_id] = topic
            by_name[topic.name] = topic
        return TopicsImage(MappingProxyType(by_id), MappingProxyType(by_name))

    def topic_was_deleted(self, topic_name: str) -> bool:
        """Whether the image's topic of that name was deleted, even if a topic of the same
        name was created again after it."""
        topic = self.image.topics_by_name.get(topic_name)
        return topic is not None and topic.id in self.deleted_topic_ids

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """What this delta changes for the replicas of ``broker_id`` (Kafka's
        TopicsDelta.localChanges): its changed topics' partitions, and every partition it
        hosted of a deleted topic."""
        changes = _Changes()
        for delta in self.changed_topics.values():
            delta.gather_local_changes(broker_id, changes)
        for topic_id in self.deleted_topic_ids:
            topic = self.image.topics_by_id[topic_id]
            for partition_id, partition in topic.partitions.items():
                if broker_id in partition.replicas:
                    changes.deletes.add(TopicPartition(topic.name, partition_id))
        return changes.freeze()
