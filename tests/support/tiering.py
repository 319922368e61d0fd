"""Copying a real UnifiedLog's rolled segments into a LocalTieredStorage and registering
them, COPY_SEGMENT_FINISHED, in the in-memory RLMM: the remote tier the read-side tests
read back, built without the RemoteLogManager."""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections.abc import AsyncIterator, Sequence

import pytest

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from tiercel.config.log_config import LogConfig
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.log_loader import load_partition_dir
from tiercel.storage.log_validator import validate_records
from tiercel.storage.log_values import LogAppendInfo
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

TOPIC_ID = uuid.UUID(int=0x7165_7263_656C)
BASE_TS = 1_700_000_000_000


def small_config(**overrides: object) -> LogConfig:
    """1 KiB segments with an index entry per ~100 bytes: many segments, many entries."""
    values: dict[str, object] = {
        "segment_bytes": 1024,
        "retention_ms": -1,
        "index_interval_bytes": 100,
        "file_delete_delay_ms": 0,
        "message_timestamp_after_max_ms": 2**62,
    }
    values.update(overrides)
    return LogConfig(**values)  # type: ignore[arg-type]


def open_log(directory: str, config: LogConfig, scheduler: Scheduler) -> UnifiedLog:
    os.makedirs(directory, exist_ok=True)
    loaded = load_partition_dir(directory, config, 0, 0, True)
    return UnifiedLog(
        loaded.directory,
        loaded.topic_partition,
        config,
        loaded.segments,
        loaded.log_start_offset,
        loaded.recovery_point,
        loaded.leader_epoch_cache,
        scheduler,
        loaded.topic_id,
        loaded.producer_state,
    )


def produce(log: UnifiedLog, values: Sequence[bytes], timestamp: int, epoch: int) -> LogAppendInfo:
    """One batch of ``values``, all stamped ``timestamp``, appended as leader of ``epoch``."""
    batch = build_record_batch([SimpleRecord(b"k", v, timestamp=timestamp) for v in values])
    return log.append_as_leader(validate_records(batch, log.config, BASE_TS), epoch, BASE_TS)


@pytest.fixture
async def scheduler() -> AsyncIterator[Scheduler]:
    s = Scheduler(asyncio.get_running_loop(), 2)
    yield s
    await s.drain()
    s.shutdown()


def checkpoint_bytes(entries: Sequence[EpochEntry]) -> bytes:
    lines = ["0", str(len(entries)), *(f"{e.epoch} {e.start_offset}" for e in entries)]
    return ("\n".join(lines) + "\n").encode()


def topic_id_partition(log: UnifiedLog) -> TopicIdPartition:
    return TopicIdPartition(log.topic_id or TOPIC_ID, log.topic_partition)


def drop_local_segments_below(log: UnifiedLog, offset: int) -> None:
    """Local retention of tiered segments, standing in for the RemoteLogManager's: the
    segments below ``offset`` leave the disk, the local log start moves to ``offset``
    and the log start stays (the records are remote). ``offset`` is a segment base."""
    doomed = [s for s in log.segments if s.base_offset < offset]
    assert log.segments[len(doomed)].base_offset == offset
    log.local_log.remove_oldest_segments(doomed)
    log._local_log_start_offset = offset


async def tier_rolled_segments(
    log: UnifiedLog,
    rsm: LocalTieredStorage,
    rlmm: InMemoryRemoteLogMetadataManager,
    snapshots: dict[int, bytes] | None = None,
    up_to: int | None = None,
    topic_id: uuid.UUID | None = None,
    mark_txn_idx_empty: bool = True,
) -> list[RemoteLogSegmentMetadata]:
    """Copy every segment but the active one, as the leader's copier would: offsets up to
    the next segment's base, the epochs of that range, the whole lineage up to its end as
    the epoch checkpoint, and ``snapshots[end + 1]`` as the producer snapshot; only the
    segments ending below ``up_to`` when given. Segments without aborts are marked
    ``txn_idx_empty`` (KIP-1058) unless ``mark_txn_idx_empty`` is False (metadata
    written before KIP-1058). Tiering is on for the log from then on, and
    its highest remote offset follows the copies."""
    tip = (
        topic_id_partition(log)
        if topic_id is None
        else TopicIdPartition(topic_id, log.topic_partition)
    )
    rlmm.on_partition_leadership_changes({tip}, set())
    log.set_remote_log_enabled(True)
    copied = []
    segments = list(log.segments)
    for segment, following in itertools.pairwise(segments):
        end = following.base_offset - 1
        if up_to is not None and end >= up_to:
            break
        epochs = log.leader_epoch_cache.epoch_entries_in_range(segment.base_offset, end + 1)
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate(tip.topic_id, log.topic_partition),
            start_offset=segment.base_offset,
            end_offset=end,
            max_timestamp_ms=segment.max_timestamp_so_far,
            broker_id=0,
            event_timestamp_ms=0,
            segment_size_in_bytes=segment.size,
            segment_leader_epochs={e.epoch: e.start_offset for e in epochs},
            txn_idx_empty=mark_txn_idx_empty and segment.txn_index.is_empty,
        )
        snapshot_path = None
        if snapshots is not None and end + 1 in snapshots:
            snapshot_path = f"{segment.log_path}.snapshot-copy"
            with open(snapshot_path, "wb") as file:
                file.write(snapshots[end + 1])
        lineage = log.leader_epoch_cache.epoch_entries_in_range(-1, end + 1)
        data = LogSegmentData(
            segment.log_path,
            segment.offset_index.path,
            segment.time_index.path,
            # Uploaded only when the segment indexed an abort, as the copier does.
            segment.txn_index.path if os.path.exists(segment.txn_index.path) else None,
            snapshot_path,
            checkpoint_bytes(lineage),
        )
        rsm.copy_log_segment_data(metadata, data)
        await rlmm.add_remote_log_segment_metadata(metadata)
        finished = RemoteLogSegmentMetadataUpdate(
            metadata.remote_log_segment_id, 0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0
        )
        await rlmm.update_remote_log_segment_metadata(finished)
        copied.append(metadata.create_with_updates(finished))
        log.update_highest_offset_in_remote_storage(end)
    return copied
