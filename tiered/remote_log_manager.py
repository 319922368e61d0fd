"""Kafka's RemoteLogManager, leader side (KIP-405): per partition, the tasks that copy
rolled segments to the remote tier and apply total retention there while this broker
leads it, or keep its highest remote offset current while it follows.

The broker calls `on_leadership_change` when it becomes leader or follower of partitions
with a remote tier, `stop_partitions` when replicas leave it, and `close` at shutdown.
A leader's copy task (`RLMCopyTask`) and expiration task (`RLMExpirationTask`) run every
``remote.log.manager.task.interval.ms``, with their uploads in a copier pool of
``remote.log.manager.copier.thread.pool.size`` threads and their deletions in an
expiration pool of ``remote.log.manager.expiration.thread.pool.size``; a follower's
task (`RLMFollowerTask`) only reads the metadata manager. A new leader epoch restarts a
partition's tasks, so a copy of the old epoch is abandoned, never finished.

Event-loop only; the storage manager is called only from the pools.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.config.remote_log_manager_config import RemoteLogManagerConfig
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.daemon_thread_pool import DaemonThreadPoolExecutor
from tiercel.tiered.rlm_copy_task import RLMCopyTask
from tiercel.tiered.rlm_expiration_task import RLMExpirationTask, delete_remote_log_segment
from tiercel.tiered.rlm_follower_task import RLMFollowerTask
from tiercel.tiered.rlm_quota import RLMQuota
from tiercel.tiered.rlm_task import RLMContext, RLMTask
from tiercel.tiered.rlmm.remote_log_metadata_manager import RemoteLogMetadataManager
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteStorageManager,
)

__all__ = ["CLOSE_TIMEOUT_S", "RemoteLogManager"]

_log: Final = logging.getLogger("tiercel.remote_log_manager")
# How long a shutdown waits for the remote pools' calls in flight (Kafka's 10 s a pool,
# here for all of them together, so that a store that does not answer delays a
# broker's stop by 10 s, not by 10 s a pool).
CLOSE_TIMEOUT_S: Final = 10.0
# The copier threads' nice value. An upload is background work, and on a busy machine
# its thread contended with the event loop for cores and the GIL: producing 600 MB
# with copies running all along went at 0.81-0.90 of the speed without tiering with
# the copiers at nice 0, and at 0.91-1.01 at nice 10, measured one after the other
# (tests/bench/tiered_produce.py, README "Tiered storage figures"). On an idle core
# the copier runs at full speed.
COPIER_NICE: Final = 10


@dataclass(slots=True)
class _Running:
    """A partition's tasks, each with the asyncio task running it."""

    tasks: list[tuple[RLMTask, asyncio.Task[None]]]
    log: UnifiedLog
    leader_epoch: int | None  # None: followed

    def cancel(self) -> None:
        for task, runner in self.tasks:
            task.cancel()
            runner.cancel()


class RemoteLogManager:
    """Invariant: a partition has leader tasks (copy, expiration) or a follower task,
    never both, and only while the broker leads or follows it. Event-loop only."""

    def __init__(
        self,
        config: RemoteLogManagerConfig,
        broker_id: int,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
    ) -> None:
        self.config = config
        self.context = RLMContext(
            config,
            broker_id,
            rsm,
            rlmm,
            DaemonThreadPoolExecutor(
                config.remote_log_manager_copier_thread_pool_size, "rlm-copier", COPIER_NICE
            ),
            DaemonThreadPoolExecutor(
                config.remote_log_manager_expiration_thread_pool_size, "rlm-expiration"
            ),
            RLMQuota(config.remote_log_manager_copy_max_bytes_per_second),
        )
        self._partitions: dict[TopicIdPartition, _Running] = {}
        self._deletions: set[asyncio.Task[None]] = set()
        # The partitions whose remote data is being deleted (`_delete_partition`).
        self._deleting: dict[TopicIdPartition, asyncio.Task[None]] = {}
        self.context.upload_abandoned = self._retire_abandoned_upload
        self._closed = False

    def on_leadership_change(
        self,
        leaders: Mapping[TopicIdPartition, tuple[UnifiedLog, int]],
        followers: Mapping[TopicIdPartition, UnifiedLog],
    ) -> None:
        """Lead ``leaders`` (partition -> its log and leader epoch) and follow
        ``followers`` from now on (Kafka's onLeadershipChange). A partition whose remote
        data is still being deleted starts at the first call after the deletion: in
        Kafka the config change that turned tiering off deletes it before the one that
        turns tiering on again is applied (ConfigHandler, one change at a time); tasks
        started meanwhile would copy beside the deletion, and lose the metadata
        manager's assignment of the partition when it ends."""
        if self._closed:
            return
        new_followers = {
            partition: log
            for partition, log in followers.items()
            if partition not in self._deleting and not self._runs(partition, log, None)
        }
        new_leaders = {
            partition: (log, epoch)
            for partition, (log, epoch) in leaders.items()
            if partition not in self._deleting and not self._runs(partition, log, epoch)
        }
        if not new_leaders and not new_followers:
            return
        self.context.rlmm.on_partition_leadership_changes(set(new_leaders), set(new_followers))
        for partition, log in new_followers.items():
            self._start(partition, log, None)
        for partition, (log, epoch) in new_leaders.items():
            self._start(partition, log, epoch)

    def _runs(self, partition: TopicIdPartition, log: UnifiedLog, epoch: int | None) -> bool:
        running = self._partitions.get(partition)
        return running is not None and running.log is log and running.leader_epoch == epoch

    @property
    def partitions(self) -> set[TopicIdPartition]:
        """The partitions led or followed with a remote tier."""
        return set(self._partitions)

    def _start(self, partition: TopicIdPartition, log: UnifiedLog, epoch: int | None) -> None:
        self._cancel(partition)
        context = self.context
        tasks: list[RLMTask] = (
            [RLMFollowerTask(context, partition, log)]
            if epoch is None
            else [
                RLMCopyTask(context, partition, log, epoch),
                RLMExpirationTask(context, partition, log),
            ]
        )
        name = f"{type(tasks[0]).__name__} {log.topic_partition}"
        self._partitions[partition] = _Running(
            [(t, asyncio.get_running_loop().create_task(t.run(), name=name)) for t in tasks],
            log,
            epoch,
        )

    def _cancel(self, partition: TopicIdPartition) -> None:
        running = self._partitions.pop(partition, None)
        if running is not None:
            running.cancel()

    def stop_partitions(
        self, partitions: Collection[TopicIdPartition], delete_remote: bool
    ) -> None:
        """Stop the tasks of ``partitions`` (no longer led or followed here); with
        ``delete_remote`` (topic deleted), those this broker led delete their remote
        segments too: one broker per partition, so its deletions never race another's."""
        led = {
            p: running.log
            for p in partitions
            if (running := self._partitions.get(p)) is not None and running.leader_epoch is not None
        }
        for partition in partitions:
            self._cancel(partition)
        deleting = led if delete_remote else {}
        for partition, log in deleting.items():
            task = asyncio.get_running_loop().create_task(
                self._delete_partition(partition, log), name=f"remote delete {partition}"
            )
            self._deletions.add(task)
            self._deleting[partition] = task
            task.add_done_callback(functools.partial(self._deletion_done, partition))
        self.context.rlmm.on_stop_partitions(set(partitions) - deleting.keys())

    def _deletion_done(self, partition: TopicIdPartition, task: asyncio.Task[None]) -> None:
        self._deletions.discard(task)
        if self._deleting.get(partition) is task:
            del self._deleting[partition]

    def _retire_abandoned_upload(
        self, metadata: RemoteLogSegmentMetadata, returned: asyncio.Event
    ) -> None:
        """An upload whose copy task was cancelled because this broker stopped leading
        the partition: its thread deletes what it wrote, and then its metadata goes
        through the DELETE states. Left COPY_SEGMENT_STARTED it would stay for good
        with infinite retention: only this broker could finish it, and the partition's
        next leader leaves other brokers' unfinished uploads to retention (Kafka lets
        such a copy run on and record COPY_SEGMENT_FINISHED instead; here it is undone).
        Not while the manager stops: the metadata manager closes too, and this broker's
        expiration task deletes its own unfinished uploads once it leads again."""
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(
            self._retire(metadata, returned),
            name=f"retire upload {metadata.remote_log_segment_id.id}",
        )
        self._deletions.add(task)
        task.add_done_callback(self._deletions.discard)

    async def _retire(self, metadata: RemoteLogSegmentMetadata, returned: asyncio.Event) -> None:
        await returned.wait()
        upload = {
            "partition": str(metadata.topic_id_partition.topic_partition),
            "segment_id": str(metadata.remote_log_segment_id.id),
        }
        try:
            await delete_remote_log_segment(self.context, metadata)
        except Exception as e:  # already being deleted, or the partition no longer followed
            log_event(
                _log,
                logging.WARNING,
                "remote_abandoned_upload_not_retired",
                **upload,
                error=repr(e),
            )
        else:
            log_event(
                _log,
                logging.INFO,
                "remote_abandoned_upload_retired",
                **upload,
                base_offset=metadata.start_offset,
            )

    async def _delete_partition(self, partition: TopicIdPartition, log: UnifiedLog) -> None:
        """Kafka's deleteRemoteLogPartition: each remote segment through
        DELETE_SEGMENT_STARTED and _FINISHED, and no partition-delete markers. Read back
        from ``__remote_log_metadata``, a DELETE_PARTITION_FINISHED would end the view
        of a partition that is tiered again under the same topic id (KIP-950's disable,
        then enable). A log still here (remote storage turned off) then starts at its
        local start, with nothing in the remote tier any more (Kafka's
        ConfigHandler.maybeUpdateRemoteLogComponents)."""
        context = self.context
        # An upload cancelled with the tasks may still be running: its objects must not
        # land after the deletion.
        while any(i.topic_id_partition == partition for i in context.segment_ids_being_copied):
            await asyncio.sleep(0.05)
        try:
            for metadata in context.rlmm.list_remote_log_segments(partition):
                await delete_remote_log_segment(context, metadata)
            if not log.deleted:
                log.maybe_increment_log_start_offset(
                    min(log.local_log_start_offset, log.high_watermark)
                )
                # Else LATEST_TIERED kept the offset copied before, and local retention
                # would delete segments up to it once tiering is on again, before any
                # copy of them.
                log.reset_highest_offset_in_remote_storage()
        except Exception as e:
            log_event(
                _log,
                logging.WARNING,
                "remote_partition_delete_failed",
                partition=str(partition),
                error=repr(e),
            )
        finally:
            context.rlmm.on_stop_partitions({partition})

    def copy_backlog_bytes(self, partition: TopicIdPartition) -> int:
        """Bytes of rolled segments below the high watermark not yet copied, as of the
        copy task's last round (0 if this broker does not lead the partition)."""
        running = self._partitions.get(partition)
        tasks = running.tasks if running is not None else []
        return sum(t.backlog_bytes for t, _ in tasks if isinstance(t, RLMCopyTask))

    def task(self, partition: TopicIdPartition, kind: type[RLMTask]) -> RLMTask | None:
        """The partition's running task of type ``kind``, if any (for tests and tools)."""
        running = self._partitions.get(partition)
        return next((t for t, _ in running.tasks if isinstance(t, kind)), None) if running else None

    async def close(self) -> None:
        """`stop`, then close the storage manager. The broker closes in Kafka's full
        order instead (`tiercel.server.remote_log_wiring`): the reader pool between."""
        await self.stop()
        self.context.rsm.close()

    async def stop(self, deadline: float | None = None) -> None:
        """Stop every task and the copier and expiration pools, the first steps of
        Kafka's RemoteLogManager.close; the storage and metadata managers stay open for
        the reads still in flight. The pools' calls running are waited for until
        ``deadline`` (the loop's clock; by default `CLOSE_TIMEOUT_S` from now). An
        upload in progress finishes in its thread and is abandoned (it stays
        COPY_SEGMENT_STARTED, deleted by this broker once it leads the partition again,
        or with retention); one abandoned earlier whose metadata is being retired stays
        so too."""
        self._closed = True
        runners = [r for running in self._partitions.values() for _, r in running.tasks]
        runners += self._deletions  # cut short at shutdown: the remote data stays
        for deletion in self._deletions:
            deletion.cancel()
        for partition in list(self._partitions):
            self._cancel(partition)
        for runner in runners:
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        pools = (self.context.copier_pool, self.context.expiration_pool)
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        # Calls already running finish (their results are dropped) before the storage
        # manager closes, for at most Kafka's 10 s (RemoteLogManager.close): a call
        # stuck on an unreachable store is left to its daemon thread.
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + CLOSE_TIMEOUT_S
        for pool in pools:
            remaining = max(0.0, deadline - asyncio.get_running_loop().time())
            await asyncio.to_thread(pool.join, remaining)
