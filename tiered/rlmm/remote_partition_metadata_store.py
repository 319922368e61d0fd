"""The view of every followed partition's remote segments (Kafka's
RemotePartitionMetadataStore): a `RemoteLogMetadataCache` per partition, and the delete
state of deleted partitions. A RemoteLogMetadataManager applies what it reads from its
backing store here and answers lookups from here.

Not thread-safe: event-loop only.
"""

from __future__ import annotations

from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.tiered.rlmm.remote_log_metadata_cache import RemoteLogMetadataCache
from tiercel.tiered.rlmm.remote_log_metadata_manager import (
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteResourceNotFoundError,
)

__all__ = ["RemotePartitionMetadataStore"]


class RemotePartitionMetadataStore:
    def __init__(self) -> None:
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self._deletes: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}

    # -- applying events -----------------------------------------------------------------

    def maybe_load_partition(self, partition: TopicIdPartition) -> None:
        self._caches.setdefault(partition, RemoteLogMetadataCache())

    def drop_partition(self, partition: TopicIdPartition) -> None:
        self._caches.pop(partition, None)
        self._deletes.pop(partition, None)

    def load_partition(
        self,
        partition: TopicIdPartition,
        segments: list[RemoteLogSegmentMetadata],
        delete: RemotePartitionDeleteMetadata | None,
    ) -> None:
        """Replace the partition's view with one read from a snapshot: ``segments`` in
        `RemoteLogMetadataCache.segments_in_replay_order`."""
        self.drop_partition(partition)
        cache = self._caches[partition] = RemoteLogMetadataCache()
        for metadata in segments:
            cache.restore(metadata)
        if delete is not None:
            self._deletes[partition] = delete

    def handle_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.maybe_load_partition(metadata.topic_id_partition)
        self._caches[metadata.topic_id_partition].add_copy_in_progress_segment(metadata)

    def handle_remote_log_segment_metadata_update(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> None:
        self.cache(
            update.remote_log_segment_id.topic_id_partition
        ).update_remote_log_segment_metadata(update)

    def handle_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> None:
        """Kafka's handleRemotePartitionDeleteMetadata, but for what FINISHED leaves: the
        partition's view emptied, where Kafka drops it. Kafka never writes these markers
        (its RemoteLogManager deletes a partition's segments through the DELETE_SEGMENT
        states only); earlier Tiercel versions did when remote storage was turned off,
        and a topic tiered again under the same id reads them back from the metadata
        topic before its new segments: a dropped view refused those for good."""
        partition = metadata.topic_id_partition
        current = self._deletes.get(partition)
        if current is not None and not current.state.is_valid_transition(metadata.state):
            raise ValueError(
                f"remote partition {partition} cannot go from {current.state.name} "
                f"to {metadata.state.name}"
            )
        if metadata.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            self._deletes.pop(partition, None)
            if partition in self._caches:
                self._caches[partition] = RemoteLogMetadataCache()
        else:
            self._deletes[partition] = metadata

    # -- lookups ---------------------------------------------------------------------------

    def cache(self, partition: TopicIdPartition) -> RemoteLogMetadataCache:
        cache = self._caches.get(partition)
        if cache is None:
            raise RemoteResourceNotFoundError(f"no remote log metadata for {partition}")
        return cache

    def partition_delete_state(
        self, partition: TopicIdPartition
    ) -> RemotePartitionDeleteState | None:
        metadata = self._deletes.get(partition)
        return metadata.state if metadata is not None else None

    def remote_partition_delete_metadata(
        self, partition: TopicIdPartition
    ) -> RemotePartitionDeleteMetadata | None:
        return self._deletes.get(partition)

    def partitions(self) -> list[TopicIdPartition]:
        return list(self._caches)
