"""Real UnifiedLogs on tmp dirs, a LocalTieredStorage, the in-memory metadata manager and
an RLMContext around them: what the RemoteLogManager unit tests build on."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from tiercel.config.broker_config import BrokerConfig
from tiercel.config.log_config import LogConfig
from tiercel.config.remote_log_manager_config import RemoteLogManagerConfig
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.log_loader import load_partition_dir
from tiercel.storage.log_validator import validate_records
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.daemon_thread_pool import DaemonThreadPoolExecutor
from tiercel.tiered.rlm_quota import RLMQuota
from tiercel.tiered.rlm_task import RLMContext
from tiercel.tiered.rsm.remote_storage_manager import (
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageError,
    RemoteStorageManager,
)

BASE_TS = 1_700_000_000_000
BROKER = BrokerConfig({"remote.log.storage.system.enable": "true"})
TOPIC_ID = uuid.UUID("5b0c7a3e-0c4e-4d55-8f4a-7f1b2c3d4e5f")
TP = TopicPartition("orders", 0)
PARTITION = TopicIdPartition(TOPIC_ID, TP)
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED


def tiered_config(**overrides: object) -> LogConfig:
    """Tiered, 1 KiB segments, no time retention (the test timestamps are old). Keyword
    names are topic keys with '_' for '.' (``local_retention_bytes=1``)."""
    values: dict[str, object] = {
        "segment.bytes": 1024,
        "retention.ms": -1,
        "index.interval.bytes": 100,
        "file.delete.delay.ms": 0,
        "message.timestamp.after.max.ms": 2**62,
        "remote.storage.enable": "true",
    }
    values.update({name.replace("_", "."): value for name, value in overrides.items()})
    return LogConfig.from_overrides(BROKER, {k: str(v) for k, v in values.items()})


def open_log(
    directory: str,
    config: LogConfig,
    scheduler: Scheduler,
    *,
    log_start_offset: int = 0,
    remote: bool = True,
) -> UnifiedLog:
    """Load a partition directory as the LogManager does, with or without a remote tier."""
    os.makedirs(directory, exist_ok=True)
    loaded = load_partition_dir(
        directory, config, 0, log_start_offset, True, remote_log_enabled=remote
    )
    return UnifiedLog(
        loaded.directory,
        loaded.topic_partition,
        config,
        loaded.segments,
        loaded.log_start_offset,
        loaded.recovery_point,
        loaded.leader_epoch_cache,
        scheduler,
        TOPIC_ID,
        loaded.producer_state,
        remote_log_enabled=remote,
    )


def produce(log: UnifiedLog, batches: int, epoch: int = 0, records: int = 2) -> None:
    """Append ``batches`` batches of ``records`` ~40-byte records as leader of ``epoch``."""
    for _ in range(batches):
        start = log.log_end_offset
        values = [b"%08d" % (start + i) * 4 for i in range(records)]
        data = build_record_batch([SimpleRecord(b"k", v, timestamp=BASE_TS) for v in values])
        log.append_as_leader(validate_records(data, log.config, BASE_TS), epoch, BASE_TS)


async def commit(log: UnifiedLog, scheduler: Scheduler) -> None:
    """Everything appended is committed (the HW at the log end) and the producer
    snapshots taken at the rolls are written."""
    log.update_high_watermark(log.log_end_offset)
    await scheduler.drain()


async def committed_log(tmp_path: Path, scheduler: Scheduler) -> UnifiedLog:
    """``orders-0`` under ``tmp_path``, tiered, with 20 batches (several rolled
    segments), all committed."""
    log = open_log(str(tmp_path / "orders-0"), tiered_config(), scheduler)
    produce(log, 20)
    await commit(log, scheduler)
    return log


def rlm_config(**overrides: object) -> RemoteLogManagerConfig:
    """Keyword names are broker keys with '_' for '.'."""
    values: dict[str, object] = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": 10,
        "remote.log.manager.task.retry.backoff.ms": 1,
        "remote.log.manager.task.retry.backoff.max.ms": 5,
    }
    values.update({name.replace("_", "."): value for name, value in overrides.items()})
    return RemoteLogManagerConfig.from_broker(BrokerConfig({k: str(v) for k, v in values.items()}))


def make_context(
    rsm: RemoteStorageManager, rlmm: InMemoryRemoteLogMetadataManager, broker_id: int = 1
) -> RLMContext:
    rlmm.on_partition_leadership_changes({PARTITION}, set())
    return RLMContext(
        rlm_config(),
        broker_id,
        rsm,
        rlmm,
        DaemonThreadPoolExecutor(2, "rlm-copier"),
        DaemonThreadPoolExecutor(2, "rlm-expiration"),
        RLMQuota(2**62),
    )


def segments(
    rlmm: InMemoryRemoteLogMetadataManager, state: RemoteLogSegmentState | None = FINISHED
) -> list[RemoteLogSegmentMetadata]:
    return [
        m for m in rlmm.list_remote_log_segments(PARTITION) if state is None or m.state == state
    ]


class _Hold:
    """Where storage calls wait: ``started`` is set once one waits, and they go on once
    the test sets ``release`` (after 10 s at most, failing)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.started.set()
        assert self.release.wait(10)


class FlakyStorage:
    """A RemoteStorageManager double around a real one: the first ``failures`` copies
    raise RemoteStorageError; ``before_copy`` runs in the copier thread first."""

    def __init__(self, inner: RemoteStorageManager, failures: int = 0) -> None:
        self.inner = inner
        self.failures = failures
        self.copies = 0
        self.before_copy: Callable[[], None] = lambda: None
        self.before_delete: Callable[[], None] = lambda: None

    def hold_copies(self) -> tuple[threading.Event, threading.Event]:
        """Make copies wait in the copier thread: (``started``, set once one waits;
        ``release``, set by the test to let them go on, for 10 s at most)."""
        hold = _Hold()
        self.before_copy = hold
        return hold.started, hold.release

    def hold_deletes(self) -> tuple[threading.Event, threading.Event]:
        """Likewise for deletions, in the expiration thread."""
        hold = _Hold()
        self.before_delete = hold
        return hold.started, hold.release

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        self.copies += 1
        self.before_copy()
        if self.copies <= self.failures:
            raise RemoteStorageError(f"object store unreachable (copy {self.copies})")
        self.inner.copy_log_segment_data(metadata, data)

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> bytes:
        return self.inner.fetch_log_segment(metadata, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: object) -> bytes:
        return self.inner.fetch_index(metadata, index_type)  # type: ignore[arg-type]

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self.before_delete()
        self.inner.delete_log_segment_data(metadata)

    def close(self) -> None:
        self.inner.close()
