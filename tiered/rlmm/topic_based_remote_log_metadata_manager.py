"""The RemoteLogMetadataManager backed by ``__remote_log_metadata`` (Kafka's
TopicBasedRemoteLogMetadataManager, with its ProducerManager and ConsumerManager).

A write serializes the event (`remote_log_metadata_serde`), appends it with acks=all to
the metadata partition of its user partition (`RemoteLogMetadataTopicPartitioner`) and
returns once this broker's `ConsumerTask` has applied that offset (Kafka's
waitTillConsumptionCatchesUp), so that a lookup right after a write sees it. The whole
is bounded by ``remote.log.metadata.consume.wait.ms``; any failure raises
`RemoteStorageError`. Lookups answer from the `RemotePartitionMetadataStore` the
consumer keeps.

Start-up (`start`, Kafka's initializeResources) reads the snapshots, then creates the
topic if needed, retrying every ``initialization.retry.interval.ms`` for up to
``initialization.retry.max.timeout.ms``; assignments received meanwhile wait (Kafka's
pendingAssignPartitions). Every ``snapshot_interval_ms`` and at close, the consumption
of each metadata partition is written to its snapshot file, so that a restart reads
only what came after.

Event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.tiered.rlmm.consumer_task import ConsumerTask
from tiercel.tiered.rlmm.remote_log_metadata_manager import RemotePartitionDeleteMetadata
from tiercel.tiered.rlmm.remote_log_metadata_serde import RemoteLogMetadata, serialize
from tiercel.tiered.rlmm.remote_log_metadata_snapshot_file import (
    SNAPSHOT_DIR_NAME,
    MetadataPartitionSnapshot,
    read_snapshots,
    write_snapshot,
)
from tiercel.tiered.rlmm.remote_log_metadata_topic_client import (
    MetadataTopicMismatchError,
    RemoteLogMetadataTopicClient,
)
from tiercel.tiered.rlmm.remote_log_metadata_topic_partitioner import (
    RemoteLogMetadataTopicPartitioner,
)
from tiercel.tiered.rlmm.remote_partition_metadata_store import RemotePartitionMetadataStore
from tiercel.tiered.rlmm.topic_based_rlmm_config import TopicBasedRemoteLogMetadataManagerConfig
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

__all__ = ["TopicBasedRemoteLogMetadataManager", "snapshot_dir_for"]

_log: Final = logging.getLogger("tiercel.rlmm")


class TopicBasedRemoteLogMetadataManager:
    """Implements `RemoteLogMetadataManager`. Invariant: ``_consumer`` is set once
    initialized, and from then on holds every assignment (``_pending`` is empty).
    Owns ``client`` (closes it)."""

    def __init__(
        self,
        client: RemoteLogMetadataTopicClient,
        config: TopicBasedRemoteLogMetadataManagerConfig,
        snapshot_dir: str | None,
    ) -> None:
        self._client = client
        self._config = config
        self._snapshot_dir = snapshot_dir
        self._partitioner = RemoteLogMetadataTopicPartitioner(config.topic_num_partitions)
        self._store = RemotePartitionMetadataStore()
        self._consumer: ConsumerTask | None = None
        self._pending: set[TopicIdPartition] = set()
        self._initialized = asyncio.Event()
        self._initialization_error: Exception | None = None
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []
        self._written: dict[int, tuple[int, frozenset[TopicIdPartition]]] = {}
        # The snapshot write in an executor thread, if any: cancelling the task that
        # awaits it does not stop the thread, and two writes must not share a file.
        self._writing: asyncio.Future[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Begin initializing in the background (it may wait for brokers to register)."""
        self._tasks.append(asyncio.create_task(self._initialize(), name="rlmm-initialize"))

    async def _initialize(self) -> None:
        snapshots: dict[int, MetadataPartitionSnapshot] = {}
        if self._snapshot_dir is not None:
            try:
                snapshots = await asyncio.to_thread(read_snapshots, self._snapshot_dir)
            except OSError as e:  # an unreadable directory: read every partition in full
                log_event(_log, logging.WARNING, "rlmm_snapshots_unreadable", reason=repr(e))
        try:
            await self._ensure_topic()
        except Exception as e:
            self._initialization_error = e
            log_event(_log, logging.ERROR, "rlmm_initialization_failed", reason=repr(e))
            self._initialized.set()
            return
        config = self._config
        consumer = ConsumerTask(
            self._client,
            self._store,
            self._partitioner,
            config.fetch_max_wait_ms,
            config.retry_backoff_ms,
            config.retry_backoff_max_ms,
            snapshots,
        )
        consumer.add_assignments(self._pending)
        self._pending.clear()
        self._consumer = consumer
        self._tasks.append(asyncio.create_task(consumer.run(), name="rlmm-consumer"))
        if self._snapshot_dir is not None:
            self._tasks.append(asyncio.create_task(self._snapshot_periodically()))
        self._initialized.set()
        log_event(_log, logging.INFO, "rlmm_initialized", snapshots=len(snapshots))

    async def _ensure_topic(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.initialization_retry_max_timeout_ms / 1000
        while True:
            try:
                await self._client.ensure_topic()
                return
            except MetadataTopicMismatchError:
                raise
            except Exception as e:
                if loop.time() >= deadline:
                    raise
                log_event(_log, logging.INFO, "rlmm_topic_not_ready", reason=repr(e))
            await asyncio.sleep(self._config.initialization_retry_interval_ms / 1000)

    @property
    def initialized(self) -> bool:
        return self._consumer is not None

    async def close(self) -> None:
        """Stop reading, write the snapshots, release the client."""
        if self._closing:
            return
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._writing is not None:
            with contextlib.suppress(Exception):
                await self._writing
        if self._consumer is not None:
            await self._consumer.close()
            if self._snapshot_dir is not None:
                await self._write_snapshots()
        await self._client.close()

    # -- snapshots -------------------------------------------------------------------------

    async def _snapshot_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._config.snapshot_interval_ms / 1000)
            await self._write_snapshots()

    async def _write_snapshots(self) -> None:
        """Write each metadata partition's snapshot that changed since the last one."""
        consumer, directory = self._consumer, self._snapshot_dir
        assert consumer is not None and directory is not None
        for metadata_partition in consumer.metadata_partitions():
            snapshot = consumer.snapshot(metadata_partition)
            if snapshot is None:
                continue
            key = (snapshot.consumed_offset, frozenset(snapshot.partitions))
            if self._written.get(metadata_partition) == key:
                continue
            self._writing = asyncio.ensure_future(
                asyncio.to_thread(write_snapshot, directory, snapshot)
            )
            try:
                await asyncio.shield(self._writing)
            except OSError as e:
                log_event(
                    _log,
                    logging.WARNING,
                    "rlmm_snapshot_write_failed",
                    metadata_partition=metadata_partition,
                    reason=repr(e),
                )
                continue
            self._written[metadata_partition] = key

    # -- writes ----------------------------------------------------------------------------

    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"a new segment is COPY_SEGMENT_STARTED, not {metadata.state.name}")
        await self._publish(metadata.topic_id_partition, metadata)

    async def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> None:
        partition = update.remote_log_segment_id.topic_id_partition
        current = self._store.cache(partition).segment_metadata(update.remote_log_segment_id)
        if current is None:
            raise RemoteResourceNotFoundError(f"no remote segment {update.remote_log_segment_id}")
        if not current.state.is_valid_transition(update.state):
            raise ValueError(
                f"remote segment {update.remote_log_segment_id} cannot go from "
                f"{current.state.name} to {update.state.name}"
            )
        await self._publish(partition, update)

    async def put_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> None:
        partition = metadata.topic_id_partition
        current = self._store.remote_partition_delete_metadata(partition)
        if current is not None and not current.state.is_valid_transition(metadata.state):
            raise ValueError(
                f"remote partition {partition} cannot go from {current.state.name} "
                f"to {metadata.state.name}"
            )
        await self._publish(partition, metadata)

    async def _publish(self, partition: TopicIdPartition, metadata: RemoteLogMetadata) -> None:
        """Kafka's storeRemoteLogMetadata: produce, then wait for this broker's consumer
        to have applied the record."""
        if self._closing:
            raise RemoteStorageError("the remote log metadata manager is closed")
        value = serialize(metadata)
        metadata_partition = self._partitioner.metadata_partition(partition)
        timeout_ms = self._config.consume_wait_ms
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                consumer = await self._initialized_consumer()
                # Kafka checks only that the metadata partition is read here; a user
                # partition not followed would be skipped, and the write not applied.
                if not consumer.is_assigned(partition):
                    raise RemoteStorageError(f"{partition} is not followed here")
                offset = await self._client.produce(metadata_partition, value)
                await consumer.wait_until_consumed(metadata_partition, offset)
        except TimeoutError as e:
            raise RemoteStorageError(
                f"{type(metadata).__name__} of {partition} not acknowledged and consumed "
                f"within {timeout_ms} ms"
            ) from e

    async def _initialized_consumer(self) -> ConsumerTask:
        await self._initialized.wait()
        if self._consumer is None:
            raise RemoteStorageError(
                f"the remote log metadata manager failed to start: {self._initialization_error!r}"
            )
        return self._consumer

    # -- lookups ---------------------------------------------------------------------------

    def remote_log_segment_metadata(
        self, partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self._store.cache(partition).remote_log_segment_metadata(leader_epoch, offset)

    def next_segment_with_txn_index(
        self, partition: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self._store.cache(partition).next_segment_with_txn_index(leader_epoch, offset)

    def highest_offset_for_epoch(
        self, partition: TopicIdPartition, leader_epoch: int
    ) -> int | None:
        return self._store.cache(partition).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        return self._store.cache(partition).list_remote_log_segments(leader_epoch)

    def remote_log_size(self, partition: TopicIdPartition, leader_epoch: int) -> int:
        return self._store.cache(partition).remote_log_size(leader_epoch)

    def metadata_partition(self, partition: TopicIdPartition) -> int:
        return self._partitioner.metadata_partition(partition)

    def read_offset(self, metadata_partition: int) -> int | None:
        """The last offset of ``metadata_partition`` read here (for tests and tools)."""
        consumer = self._consumer
        return None if consumer is None else consumer.read_offset(metadata_partition)

    # -- assignment ------------------------------------------------------------------------

    def on_partition_leadership_changes(
        self, leaders: set[TopicIdPartition], followers: set[TopicIdPartition]
    ) -> None:
        if self._closing:
            raise RemoteStorageError("the remote log metadata manager is closed")
        partitions = leaders | followers
        if self._consumer is None:
            self._pending |= partitions
        else:
            self._consumer.add_assignments(partitions)

    def on_stop_partitions(self, partitions: set[TopicIdPartition]) -> None:
        if self._closing:
            raise RemoteStorageError("the remote log metadata manager is closed")
        if self._consumer is None:
            self._pending -= partitions
        else:
            self._consumer.remove_assignments(partitions)

    def is_ready(self, partition: TopicIdPartition) -> bool:
        return self._consumer is not None and self._consumer.is_ready(partition)


def snapshot_dir_for(log_dir: str) -> str:
    """Where the snapshots live: a directory of the broker's first log dir whose name
    the log manager never takes for a partition (it has no ``-<number>`` suffix)."""
    return os.path.join(log_dir, SNAPSHOT_DIR_NAME)
