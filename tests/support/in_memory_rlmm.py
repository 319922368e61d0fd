"""A RemoteLogMetadataManager whose writes apply at once, with no backing topic: for unit
tests of the RemoteLogManager (Kafka's tests use an in-memory manager the same way). The
broker always runs the topic-based one."""

from __future__ import annotations

from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.tiered.rlmm.remote_log_metadata_manager import RemotePartitionDeleteMetadata
from tiercel.tiered.rlmm.remote_partition_metadata_store import RemotePartitionMetadataStore
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)


class InMemoryRemoteLogMetadataManager:
    def __init__(self) -> None:
        self.store = RemotePartitionMetadataStore()

    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.store.handle_remote_log_segment_metadata(metadata)

    async def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> None:
        self.store.handle_remote_log_segment_metadata_update(update)

    async def put_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> None:
        self.store.handle_remote_partition_delete_metadata(metadata)

    def remote_log_segment_metadata(
        self, partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self.store.cache(partition).remote_log_segment_metadata(leader_epoch, offset)

    def next_segment_with_txn_index(
        self, partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self.store.cache(partition).next_segment_with_txn_index(leader_epoch, offset)

    def highest_offset_for_epoch(
        self, partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        return self.store.cache(partition).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        return self.store.cache(partition).list_remote_log_segments(leader_epoch)

    def remote_log_size(self, partition: TopicIdPartition, leader_epoch: int) -> int:
        return self.store.cache(partition).remote_log_size(leader_epoch)

    def on_partition_leadership_changes(
        self, leaders: set[TopicIdPartition], followers: set[TopicIdPartition]
    ) -> None:
        for partition in leaders | followers:
            self.store.maybe_load_partition(partition)

    def on_stop_partitions(self, partitions: set[TopicIdPartition]) -> None:
        # In memory there is nothing else to read the view back from: keep it.
        pass

    def is_ready(self, partition: TopicIdPartition) -> bool:
        return partition in self.store.partitions()

    async def close(self) -> None:
        pass
