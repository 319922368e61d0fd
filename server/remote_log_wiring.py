"""The broker's remote tier (KIP-405): the RemoteLogManager created at start-up when
``remote.log.storage.system.enable`` is true, told which tiered partitions this broker
leads or follows, and closed at shutdown.

Kafka's ReplicaManager calls the RemoteLogManager from becomeLeaderOrFollower and
stopPartitions; here `RemoteLogWiring` follows the ReplicaManager instead, so that the
replica manager itself does not grow: a leadership listener reconciles at once on every
leader change, and a periodic pass (every ``remote.log.manager.task.interval.ms``)
picks up followers, partitions gone, and topics whose ``remote.storage.enable`` changed.
A deleted topic's partitions, and those of a topic whose remote storage was turned off
with ``remote.log.delete.on.disable``, lose their remote data.

The storage manager is the one ``remote.log.storage.manager.class.name`` names (the
local directory ``<first log dir>/remote-storage`` by default, S3, or a user's class),
configured by the ``rsm.config.`` properties; the metadata manager is Kafka's
topic-based one on ``__remote_log_metadata``, configured by the ``rlmm.config.`` ones.

Event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Final

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.logging_setup import log_event
from tiercel.config.remote_log_manager_config import RemoteLogManagerConfig
from tiercel.server.admin_manager import AdminManager
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.remote_log_metadata_topic import create_topic_based_rlmm
from tiercel.server.replica_manager import ReplicaManager
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.remote_log_manager import CLOSE_TIMEOUT_S, RemoteLogManager
from tiercel.tiered.remote_log_reader import RemoteLogReader
from tiercel.tiered.rlmm.topic_based_remote_log_metadata_manager import (
    TopicBasedRemoteLogMetadataManager,
)
from tiercel.tiered.rsm.factory import create_remote_storage_manager as rsm_from_config
from tiercel.tiered.rsm.remote_storage_manager import RemoteStorageManager

__all__ = [
    "RemoteLogWiring",
    "create_remote_log_metadata_manager",
    "create_remote_storage_manager",
    "start_remote_log_manager",
]

_log: Final = logging.getLogger("tiercel.remote_log_manager")


def create_remote_storage_manager(config: BrokerConfig) -> RemoteStorageManager:
    """The RemoteStorageManager ``remote.log.storage.manager.class.name`` names; the
    local tier defaults to ``<first log dir>/remote-storage``, which the LogManager
    never takes for a partition."""
    return rsm_from_config(
        str(config.get("remote.log.storage.manager.class.name")),
        config.remote_storage_manager_props(),
        os.path.join(config.log_dirs[0], "remote-storage"),
    )


def create_remote_log_metadata_manager(
    config: BrokerConfig,
    replica_manager: ReplicaManager,
    metadata_cache: MetadataCache,
    admin_manager: AdminManager,
) -> TopicBasedRemoteLogMetadataManager:
    """Kafka's TopicBasedRemoteLogMetadataManager over this broker's own pieces, started."""
    rlmm = create_topic_based_rlmm(
        config,
        config.node_id,
        replica_manager,
        metadata_cache,
        admin_manager,
        config.remote_log_metadata_manager_props(),
    )
    rlmm.start()
    return rlmm


class RemoteLogWiring:
    """Invariant: after each `reconcile`, the RemoteLogManager runs tasks for exactly
    the partitions hosted here whose log has a remote tier. Event-loop only."""

    def __init__(
        self,
        rlm: RemoteLogManager,
        reader: RemoteLogReader,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
    ) -> None:
        self.rlm = rlm
        self.reader = reader
        self._replica_manager = replica_manager
        self._metadata_cache = metadata_cache
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        # Consumers below the local start read through the reader; the expiration task
        # tells its index cache of each segment deleted.
        self._replica_manager.remote_log_manager = self.reader
        self._replica_manager.remote_fetch_max_wait_ms = self.rlm.config.remote_fetch_max_wait_ms
        self.rlm.context.segment_deleted_listeners.append(
            lambda metadata: self.reader.index_cache.remove(metadata.remote_log_segment_id.id)
        )
        self._replica_manager.leadership_listeners.append(self._on_leadership_change)
        self._task = asyncio.get_running_loop().create_task(self._every_interval(), name="rlm")

    def _on_leadership_change(self, tp: TopicPartition, leader_epoch: int | None) -> None:
        self.reconcile()

    async def _every_interval(self) -> None:
        interval_s = self.rlm.config.remote_log_manager_task_interval_ms / 1000
        while True:
            self.reconcile()
            await asyncio.sleep(interval_s)

    def reconcile(self) -> None:
        """Never raises: the replica manager's listeners must all run, and the next
        pass retries whatever failed."""
        if self._replica_manager.closed:
            return
        try:
            self._reconcile()
        except Exception as e:
            log_event(_log, logging.WARNING, "remote_log_reconcile_failed", error=repr(e))

    def _reconcile(self) -> None:
        leaders: dict[TopicIdPartition, tuple[UnifiedLog, int]] = {}
        followers: dict[TopicIdPartition, UnifiedLog] = {}
        for tp, partition in self._replica_manager.partitions.items():
            log = partition.log
            if log.deleted or not log.remote_log_enabled:
                continue
            key = TopicIdPartition(partition.topic_id, tp)
            if partition.is_leader:
                leaders[key] = (log, partition.leader_epoch)
            else:
                followers[key] = log
        gone = self.rlm.partitions - leaders.keys() - followers.keys()
        doomed = {p for p in gone if self._remote_data_deleted(p)}
        if doomed:
            self.rlm.stop_partitions(doomed, delete_remote=True)
        if gone - doomed:
            self.rlm.stop_partitions(gone - doomed, delete_remote=False)
        self.rlm.on_leadership_change(leaders, followers)

    def _remote_data_deleted(self, partition: TopicIdPartition) -> bool:
        """Whether a partition no longer tiered here loses its remote data: its topic
        was deleted (Kafka's StopReplica with deletion), or its remote storage turned
        off with ``remote.log.delete.on.disable`` (KIP-950). A replica moved away by a
        reassignment keeps it."""
        topic = self._metadata_cache.topic(partition.topic_partition.topic)
        if topic is None or topic.topic_id != partition.topic_id:
            return True
        hosted = self._replica_manager.partitions.get(partition.topic_partition)
        config = hosted.log.config if hosted is not None else None
        return (
            config is not None
            and not config.remote_storage_enable
            and config.remote_log_delete_on_disable
        )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(ValueError):
            self._replica_manager.leadership_listeners.remove(self._on_leadership_change)
        self._replica_manager.remote_log_manager = None
        # Kafka's RemoteLogManager.close order: the tasks and their pools, the reader
        # pool with the reads in flight, then the index cache, the metadata manager and
        # last the storage manager, which a read still running would otherwise find
        # closed. The pools are waited for 10 s in all (a call stuck on an unreachable
        # store is left to its daemon thread).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLOSE_TIMEOUT_S
        await self.rlm.stop(deadline)
        remaining = max(0.0, deadline - loop.time())
        await loop.run_in_executor(None, self.reader.close, remaining)
        await self.rlm.context.rlmm.close()
        self.rlm.context.rsm.close()


async def start_remote_log_manager(
    config: BrokerConfig,
    replica_manager: ReplicaManager,
    metadata_cache: MetadataCache,
    admin_manager: AdminManager,
) -> RemoteLogWiring | None:
    """The broker's RemoteLogManager, started, or None when the broker has no remote
    tier (``remote.log.storage.system.enable=false``)."""
    rlm_config = RemoteLogManagerConfig.from_broker(config)
    if not rlm_config.remote_log_storage_system_enable:
        return None
    loop = asyncio.get_running_loop()
    # Made off the event loop, as every blocking RSM call is: the S3 manager's botocore
    # client loads its service model, over a second on a loaded 2-core machine.
    rsm = await loop.run_in_executor(None, create_remote_storage_manager, config)
    rlm = RemoteLogManager(
        rlm_config,
        config.node_id,
        rsm,
        create_remote_log_metadata_manager(config, replica_manager, metadata_cache, admin_manager),
    )
    reader = await loop.run_in_executor(
        None,
        RemoteLogReader.create,
        rlm.context.rsm,
        rlm.context.rlmm,
        config.log_dirs[0],
        rlm_config.remote_log_reader_threads,
        rlm_config.remote_log_reader_max_pending_tasks,
        rlm_config.remote_log_index_file_cache_total_size_bytes,
        rlm_config.remote_log_manager_fetch_max_bytes_per_second,
    )
    wiring = RemoteLogWiring(rlm, reader, replica_manager, metadata_cache)
    wiring.start()
    return wiring
