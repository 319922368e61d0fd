"""LogManager: the log directories, every partition's UnifiedLog, and their periodic upkeep.

Event-loop only; loading, flushing and checkpoint writes run in the `Scheduler`'s
executor. What it keeps in each log dir, in Kafka's formats:

    meta.properties                    cluster.id, node.id, version
    recovery-point-offset-checkpoint   fsynced up to here, per partition
    replication-offset-checkpoint      high watermarks
    log-start-offset-checkpoint        log start offsets
    cleaner-offset-checkpoint          first dirty offset of compacted logs (the LogCleaner)
    .kafka_cleanshutdown               present only between a clean stop and the next start
    <topic>-<partition>/               one per partition replica

At start-up a missing clean-shutdown marker means the broker died: every partition is
recovered past its recovery point. Periodic tasks apply retention, flush logs per
``flush.ms`` and write the checkpoints; a log's truncation writes its dir's recovery
points at once and moves its cleaner checkpoint back (Kafka's LogManager.truncateTo);
the `LogCleaner` compacts logs with ``cleanup.policy=compact`` alongside; shutdown stops
the cleaner, flushes and closes every log, writes the checkpoints, then the marker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.log_config import LogConfig
from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import KafkaStorageError
from tiercel.storage.checkpoint_file import (
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    LOG_START_OFFSET_CHECKPOINT_FILENAME,
    PARTITION_METADATA_FILENAME,
    RECOVERY_POINT_OFFSET_CHECKPOINT_FILENAME,
    REPLICATION_OFFSET_CHECKPOINT_FILENAME,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
)
from tiercel.storage.file_names import DELETE_DIR_SUFFIX
from tiercel.storage.leader_epoch_cache import LeaderEpochFileCache
from tiercel.storage.log_cleaner import CleanerConfig, LogCleaner
from tiercel.storage.log_dir_failure_channel import LogDirFailureChannel, maybe_handle_io_exception
from tiercel.storage.log_loader import LoadedLog, load_partition_dir, parse_partition_dir_name
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.meta_properties import MetaProperties
from tiercel.storage.producer_state import ProducerStateManager
from tiercel.storage.remote_log_enabled import is_remote_log_enabled
from tiercel.storage.scheduler import CoalescingWriter, Scheduler
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.unified_log import UnifiedLog

_log: Final = logging.getLogger("tiercel.log_manager")

CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
# KRaft's metadata topic (Kafka's KafkaRaftServer.MetadataTopic).
METADATA_TOPIC: Final = "__cluster_metadata"
LogConfigFor = Callable[[str], LogConfig]


@dataclass(slots=True)
class _LogDir:
    path: str
    recovery_points: OffsetCheckpointFile
    high_watermarks: OffsetCheckpointFile
    log_start_offsets: OffsetCheckpointFile


class LogManager:
    def __init__(
        self, config: BrokerConfig, scheduler: Scheduler, log_config_for: LogConfigFor
    ) -> None:
        self._config = config
        self._scheduler = scheduler
        self._log_config_for = log_config_for
        self._dirs = [
            _LogDir(
                os.path.abspath(path),
                OffsetCheckpointFile(os.path.join(path, RECOVERY_POINT_OFFSET_CHECKPOINT_FILENAME)),
                OffsetCheckpointFile(os.path.join(path, REPLICATION_OFFSET_CHECKPOINT_FILENAME)),
                OffsetCheckpointFile(os.path.join(path, LOG_START_OFFSET_CHECKPOINT_FILENAME)),
            )
            for path in config.log_dirs
        ]
        self.log_dir_failure_channel = LogDirFailureChannel()
        self.offline_log_dirs: list[str] = []
        # One recovery-point write in flight per dir, so a truncation's lowered values
        # are never overwritten by an older periodic write finishing after them.
        self._recovery_point_writers = {
            d.path: CoalescingWriter(
                scheduler,
                self._recovery_points_in(d.path),
                self._checkpoint_writer(d.path, d.recovery_points),
                d.recovery_points.path,
            )
            for d in self._dirs
        }
        self._logs: dict[TopicPartition, UnifiedLog] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.cleaner = LogCleaner(
            CleanerConfig.from_broker(config), [d.path for d in self._dirs], self._logs, scheduler
        )
        self.cluster_id: str | None = None
        self.had_clean_shutdown = True

    # -- start-up ----------------------------------------------------------------------

    async def startup(
        self, cluster_id: str | None, formatted: Mapping[str, MetaProperties] | None = None
    ) -> str:
        """Prepare the log dirs, load every partition, start the periodic tasks; returns
        the cluster id (the one stored in meta.properties, or ``cluster_id``).

        ``formatted``: a KRaft node's log dirs (as configured) and their meta.properties,
        read and verified once at the node's start (Kafka's
        KafkaRaftServer.initializeLogDirs, whose MetaPropertiesEnsemble goes on to the
        broker's LogManager): neither read again nor written here."""
        if formatted is None:
            self.cluster_id = await self._scheduler.run_blocking(self._prepare_dirs, cluster_id)
        else:
            self.cluster_id = self._formatted_cluster_id(cluster_id, formatted)
        for log_dir in self._dirs:
            await self._load_dir(log_dir)
        await self.cleaner.startup()
        self._start_periodic_tasks()
        return self.cluster_id

    def _formatted_cluster_id(
        self, cluster_id: str | None, formatted: Mapping[str, MetaProperties]
    ) -> str:
        log_dirs = self._config.log_dirs
        found = [formatted[path].cluster_id for path in log_dirs if path in formatted]
        if len(found) != len(log_dirs) or {cluster_id or found[0], *found} != {found[0]}:
            raise KafkaStorageError(
                f"log dirs {log_dirs} are not all formatted for cluster {cluster_id}: "
                f"{dict(formatted)}"
            )
        return found[0]

    def _prepare_dirs(self, cluster_id: str | None) -> str:
        """*Blocking.* Create dirs and check meta.properties agrees across them."""
        for log_dir in self._dirs:
            os.makedirs(log_dir.path, exist_ok=True)
            meta = MetaProperties.read(log_dir.path)
            if meta is not None:
                if meta.node_id != self._config.node_id:
                    raise KafkaStorageError(
                        f"{log_dir.path}/meta.properties has node.id={meta.node_id} but this "
                        f"broker is node.id={self._config.node_id}"
                    )
                if cluster_id is not None and meta.cluster_id != cluster_id:
                    raise KafkaStorageError(
                        f"{log_dir.path}/meta.properties has cluster.id={meta.cluster_id}, "
                        f"not {cluster_id}"
                    )
                cluster_id = meta.cluster_id
        if cluster_id is None:
            cluster_id = MetaProperties.generate_cluster_id()
        for log_dir in self._dirs:
            MetaProperties(cluster_id, self._config.node_id).write_if_missing(log_dir.path)
        return cluster_id

    async def _load_dir(self, log_dir: _LogDir) -> None:
        marker = os.path.join(log_dir.path, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        self.had_clean_shutdown = self.had_clean_shutdown and clean
        recovery_points = await self._scheduler.run_blocking(log_dir.recovery_points.read)
        log_starts = await self._scheduler.run_blocking(log_dir.log_start_offsets.read)
        high_watermarks = await self._scheduler.run_blocking(log_dir.high_watermarks.read)
        names = sorted(os.listdir(log_dir.path))
        jobs = []
        for name in names:
            path = os.path.join(log_dir.path, name)
            if name.endswith(DELETE_DIR_SUFFIX) and os.path.isdir(path):
                self._scheduler.run_blocking_in_background(
                    shutil.rmtree, path, True, name=f"remove {name}"
                )
                continue
            tp = parse_partition_dir_name(name)
            if tp is None or not os.path.isdir(path) or tp.topic == METADATA_TOPIC:
                # The metadata log is Raft's (KafkaMetadataLog), even in a log dir that
                # is also metadata.log.dir (Kafka's LogManager.loadLogs skips it too).
                continue
            jobs.append(
                self._scheduler.run_blocking(
                    load_partition_dir,
                    path,
                    self._log_config_for(tp.topic),
                    recovery_points.get(tp, 0),
                    log_starts.get(tp, 0),
                    clean,
                    self._config.producer_id_expiration_ms,
                    self._remote_log_enabled(tp.topic, self._log_config_for(tp.topic)),
                )
            )
        for loaded in await asyncio.gather(*jobs):
            log = self._make_log(loaded)
            log.update_high_watermark(high_watermarks.get(loaded.topic_partition, 0))
            if loaded.recovered_bytes_truncated:
                log_event(
                    _log,
                    logging.WARNING,
                    "partition_recovered",
                    partition=str(loaded.topic_partition),
                    bytes_truncated=loaded.recovered_bytes_truncated,
                    log_end_offset=log.log_end_offset,
                )
        if clean:
            # From now on a crash must be detected: the marker goes until the next clean stop.
            os.remove(marker)
        log_event(
            _log,
            logging.INFO,
            "log_dir_loaded",
            dir=log_dir.path,
            partitions=len(jobs),
            clean_shutdown=clean,
        )

    def _make_log(self, loaded: LoadedLog) -> UnifiedLog:
        config = self._log_config_for(loaded.topic_partition.topic)
        log = UnifiedLog(
            loaded.directory,
            loaded.topic_partition,
            config,
            loaded.segments,
            loaded.log_start_offset,
            loaded.recovery_point,
            loaded.leader_epoch_cache,
            self._scheduler,
            loaded.topic_id,
            loaded.producer_state,
            self.log_dir_failure_channel,
            self._remote_log_enabled(loaded.topic_partition.topic, config),
        )
        self._add_log(log)
        return log

    def _remote_log_enabled(self, topic: str, config: LogConfig) -> bool:
        system_enable = self._config.get("remote.log.storage.system.enable")
        return is_remote_log_enabled(system_enable is True, config, topic)

    def update_log_config(self, log: UnifiedLog, config: LogConfig) -> None:
        """A topic's config changed: apply it, and whether the log now has a remote tier."""
        log.update_config(config)
        log.set_remote_log_enabled(self._remote_log_enabled(log.topic_partition.topic, config))

    def _add_log(self, log: UnifiedLog) -> None:
        log.truncation_listener = self._truncated
        log.producer_state.transaction_verification_enabled = (
            self._config.transaction_partition_verification_enable
        )
        self._logs[log.topic_partition] = log

    # -- logs --------------------------------------------------------------------------

    def get_log(self, tp: TopicPartition) -> UnifiedLog | None:
        return self._logs.get(tp)

    @property
    def logs(self) -> dict[TopicPartition, UnifiedLog]:
        return self._logs

    def get_or_create_log(
        self, tp: TopicPartition, config: LogConfig, topic_id: uuid.UUID | None
    ) -> UnifiedLog:
        """The partition's log, created empty in the log dir with the fewest partitions.

        Creating is a mkdir and a few opens — the cost of an append — so it runs on the
        loop; ``partition.metadata`` is written (fsynced) in the background."""
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        log_dir = self._next_log_dir()
        path = os.path.join(log_dir.path, str(tp))
        os.makedirs(path, exist_ok=True)
        segment = LogSegment(path, 0, config.index_interval_bytes, config.segment_index_bytes)
        epoch_cache = LeaderEpochFileCache(
            tp, LeaderEpochCheckpointFile(os.path.join(path, LEADER_EPOCH_CHECKPOINT_FILENAME))
        )
        producer_state = ProducerStateManager(tp, path, self._config.producer_id_expiration_ms)
        log = UnifiedLog(
            path,
            tp,
            config,
            [segment],
            0,
            0,
            epoch_cache,
            self._scheduler,
            None,
            producer_state,
            self.log_dir_failure_channel,
            self._remote_log_enabled(tp.topic, config),
        )
        self._add_log(log)
        if topic_id is not None:
            self.set_topic_id(log, topic_id)
        log_event(_log, logging.INFO, "log_created", partition=str(tp), dir=log_dir.path)
        return log

    def set_topic_id(self, log: UnifiedLog, topic_id: uuid.UUID) -> None:
        """Record the topic id in the log and, in the background, ``partition.metadata``
        (skipped if the log is deleted first: its directory name may be reused)."""
        log.topic_id = topic_id
        metadata = PartitionMetadataFile(os.path.join(log.dir, PARTITION_METADATA_FILENAME))

        def write() -> None:
            if not log.deleted:
                metadata.write(topic_id)

        self._scheduler.run_blocking_in_background(
            write, name=f"partition.metadata {log.topic_partition}"
        )

    def _next_log_dir(self) -> _LogDir:
        counts = {d.path: 0 for d in self._dirs}
        for log in self._logs.values():
            parent = os.path.dirname(log.dir)
            if parent in counts:
                counts[parent] += 1
        return min(self._dirs, key=lambda d: counts[d.path])

    def delete_log(self, tp: TopicPartition, reason: str) -> None:
        log = self._logs.pop(tp, None)
        self.cleaner.remove_partition(tp)
        if log is not None:
            log.delete()
            log_event(_log, logging.INFO, "log_deleted", partition=str(tp), reason=reason)

    @property
    def log_dirs(self) -> list[str]:
        """The live (online) log dirs."""
        return [d.path for d in self._dirs]

    def handle_log_dir_failure(self, path: str) -> list[TopicPartition]:
        """Kafka's LogManager.handleLogDirFailure: forget an offline dir and its logs,
        closing their files without a flush or a checkpoint (nothing more is written
        there: the recovery points it last checkpointed stay); returns its partitions."""
        if all(d.path != path for d in self._dirs):
            return []
        self._dirs = [d for d in self._dirs if d.path != path]
        self.offline_log_dirs.append(path)
        offline = [tp for tp, log in self._logs.items() if log.parent_dir == path]
        for tp in offline:
            log = self._logs.pop(tp)
            self.cleaner.remove_partition(tp)
            log.producer_state.close()
            for segment in log.segments:
                segment.close()
        log_event(_log, logging.ERROR, "log_dir_offline", dir=path, partitions=len(offline))
        return offline

    # -- periodic upkeep -----------------------------------------------------------------

    def _start_periodic_tasks(self) -> None:
        config = self._config
        periodic = (
            ("log-retention", config.log_retention_check_interval_ms, self.cleanup_logs),
            ("log-flusher", config.log_flush_scheduler_interval_ms, self.flush_dirty_logs),
            (
                "recovery-point-checkpoint",
                config.log_flush_offset_checkpoint_interval_ms,
                self.checkpoint_recovery_points,
            ),
            (
                "log-start-offset-checkpoint",
                config.log_flush_start_offset_checkpoint_interval_ms,
                self.checkpoint_log_start_offsets,
            ),
            (
                "high-watermark-checkpoint",
                config.replica_high_watermark_checkpoint_interval_ms,
                self.checkpoint_high_watermarks,
            ),
            (
                "producer-expiration",
                config.producer_id_expiration_check_interval_ms,
                self.remove_expired_producers,
            ),
        )
        for name, interval_ms, job in periodic:
            if interval_ms <= 0:
                continue  # Kafka cannot schedule a zero period either; treat it as off
            self._tasks.append(
                asyncio.get_running_loop().create_task(
                    self._every(interval_ms / 1000, job), name=name
                )
            )

    async def _every(self, interval_s: float, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                result = job()
                if asyncio.iscoroutine(result):
                    await result
            except Exception as e:
                log_event(
                    _log,
                    logging.ERROR,
                    "periodic_task_failed",
                    task=asyncio.current_task().get_name(),  # type: ignore[union-attr]
                    reason=repr(e),
                )

    def cleanup_logs(self) -> int:
        deleted = 0
        for log in list(self._logs.values()):
            deleted += log.delete_old_segments()
        return deleted

    def remove_expired_producers(self) -> int:
        """Forget idempotent producers idle for producer.id.expiration.ms (Kafka's
        PeriodicProducerExpirationCheck); returns how many."""
        now = int(time.time() * 1000)
        return sum(log.producer_state.remove_expired_producers(now) for log in self._logs.values())

    async def flush_dirty_logs(self) -> None:
        for log in list(self._logs.values()):
            if log.time_since_last_flush_ms >= log.config.flush_ms:
                await log.flush()

    def _offsets_by_dir(
        self, value: Callable[[UnifiedLog], int]
    ) -> dict[str, dict[TopicPartition, int]]:
        by_dir: dict[str, dict[TopicPartition, int]] = {d.path: {} for d in self._dirs}
        for tp, log in self._logs.items():
            by_dir.setdefault(os.path.dirname(log.dir), {})[tp] = value(log)
        return by_dir

    async def _write_checkpoints(
        self, pick: Callable[[_LogDir], OffsetCheckpointFile], value: Callable[[UnifiedLog], int]
    ) -> None:
        by_dir = self._offsets_by_dir(value)
        for log_dir in list(self._dirs):
            write = self._checkpoint_writer(log_dir.path, pick(log_dir))
            await self._scheduler.run_blocking(write, by_dir[log_dir.path])

    def _checkpoint_writer(
        self, path: str, checkpoint: OffsetCheckpointFile
    ) -> Callable[[dict[TopicPartition, int]], None]:
        """*Blocking* write of ``checkpoint`` in log dir ``path``: an I/O error takes
        the dir offline; an offline dir is never written again (Kafka skips them)."""
        channel = self.log_dir_failure_channel
        message = f"Error while writing {os.path.basename(checkpoint.path)}"

        def write(offsets: dict[TopicPartition, int]) -> None:
            if channel.has_offline_log_dir(path):
                return
            with maybe_handle_io_exception(channel, path, message):
                checkpoint.write(offsets)

        return write

    async def checkpoint_recovery_points(self) -> None:
        for writer in self._recovery_point_writers.values():
            await writer.flush()

    def _recovery_points_in(self, path: str) -> Callable[[], dict[TopicPartition, int]]:
        def snapshot() -> dict[TopicPartition, int]:
            return {
                tp: log.recovery_point
                for tp, log in self._logs.items()
                if os.path.dirname(log.dir) == path
            }

        return snapshot

    def _truncated(self, log: UnifiedLog) -> None:
        """After a truncation, as Kafka's LogManager.truncateTo / truncateFullyAndStartAt:
        the cleaner's first dirty offset must not stay past the new log, and the lowered
        recovery point goes to disk now. Left to the periodic checkpoint, a crash in
        between would load the old, higher one, and recovery would skip the segments
        rewritten since the truncation."""
        self.cleaner.maybe_truncate_checkpoint(log.topic_partition, log.active_segment.base_offset)
        writer = self._recovery_point_writers.get(os.path.dirname(log.dir))
        if writer is not None:
            writer.request()

    async def checkpoint_log_start_offsets(self) -> None:
        await self._write_checkpoints(
            lambda d: d.log_start_offsets, lambda log: log.log_start_offset
        )

    async def checkpoint_high_watermarks(self) -> None:
        await self._write_checkpoints(lambda d: d.high_watermarks, lambda log: log.high_watermark)

    # -- shutdown ----------------------------------------------------------------------

    def _forget_offline_dirs(self) -> None:
        for log_dir in list(self._dirs):
            if self.log_dir_failure_channel.has_offline_log_dir(log_dir.path):
                self.handle_log_dir_failure(log_dir.path)

    async def shutdown(self) -> None:
        await self.cleaner.shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        logs = list(self._logs.values())
        closed = await asyncio.gather(*(log.close() for log in logs), return_exceptions=True)
        # A dir that fails while its logs close gets no checkpoint and no clean-shutdown
        # marker (Kafka's shutdown skips offline dirs): the next start recovers it.
        channel = self.log_dir_failure_channel
        for log, result in zip(logs, closed, strict=True):
            if isinstance(result, Exception) and not channel.has_offline_log_dir(log.parent_dir):
                raise result
        self._forget_offline_dirs()
        await self.checkpoint_recovery_points()
        await self.checkpoint_log_start_offsets()
        await self.checkpoint_high_watermarks()
        await self._scheduler.drain()
        self._forget_offline_dirs()
        for log_dir in self._dirs:
            await self._scheduler.run_blocking(_write_marker, log_dir.path)
        log_event(_log, logging.INFO, "log_manager_shutdown", partitions=len(self._logs))


def _write_marker(path: str) -> None:
    marker = os.path.join(path, CLEAN_SHUTDOWN_FILE)
    with open(marker, "w") as f:
        f.flush()
        os.fsync(f.fileno())


def total_and_usable_bytes(path: str) -> tuple[int, int]:
    usage = shutil.disk_usage(path)
    return usage.total, usage.free
