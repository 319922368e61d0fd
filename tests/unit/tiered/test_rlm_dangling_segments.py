"""Which COPY_SEGMENT_STARTED segments a leader deletes, and where a new leader continues
copying (Kafka's RLMExpirationTask.cleanupExpiredRemoteLogSegments and
findHighestRemoteOffset), on real logs, a LocalTieredStorage and the in-memory metadata
manager.

Kafka never takes another broker's unfinished upload for an orphan: it is deleted only
when retention, the log start offset or a leader-epoch-cache truncation takes it. The
old leader of a partition may still be finishing it; deleting it raced with that
broker's late COPY_SEGMENT_FINISHED, and once FINISHED its offsets counted as copied for
every later leader although the objects were gone."""

from __future__ import annotations

from pathlib import Path

from rlm_support import (
    FINISHED,
    PARTITION,
    STARTED,
    commit,
    make_context,
    open_log,
    produce,
    segments,
    tiered_config,
)

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.remote_log_segment_candidates import find_highest_remote_offset
from tiercel.tiered.rlm_copy_task import RLMCopyTask
from tiercel.tiered.rlm_expiration_task import RLMExpirationTask
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

OLD_LEADER, NEW_LEADER = 1, 2
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED


async def leader_log(tmp_path: Path, scheduler: Scheduler, **config: object) -> UnifiedLog:
    log = open_log(str(tmp_path / "orders-0"), tiered_config(**config), scheduler)
    produce(log, 20)
    await commit(log, scheduler)
    return log


async def started_by(
    rlmm: InMemoryRemoteLogMetadataManager, log: UnifiedLog, broker_id: int, index: int = 0
) -> RemoteLogSegmentMetadata:
    """COPY_SEGMENT_STARTED metadata of the log's ``index``-th segment, as ``broker_id``'s
    copy task records it before uploading."""
    segment, after = log.segments[index], log.segments[index + 1]
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(PARTITION.topic_id, PARTITION.topic_partition),
        segment.base_offset,
        after.base_offset - 1,
        segment.largest_timestamp(),
        broker_id,
        0,
        segment.size,
        {0: segment.base_offset},
    )
    await rlmm.add_remote_log_segment_metadata(metadata)
    return metadata


async def update(
    rlmm: InMemoryRemoteLogMetadataManager,
    metadata: RemoteLogSegmentMetadata,
    state: RemoteLogSegmentState,
    broker_id: int,
) -> None:
    await rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(metadata.remote_log_segment_id, 1, state, broker_id)
    )


async def test_another_brokers_upload_in_progress_is_no_orphan(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """The old leader is still uploading when the new leader's expiration task runs: the
    upload stays, and the old leader's late COPY_SEGMENT_FINISHED stands."""
    log = await leader_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    context = make_context(LocalTieredStorage(str(tmp_path / "remote")), rlmm, NEW_LEADER)
    uploading = await started_by(rlmm, log, OLD_LEADER)
    expiration = RLMExpirationTask(context, PARTITION, log)
    await expiration.run_once()
    assert segments(rlmm, STARTED) == [uploading]
    await update(rlmm, uploading, FINISHED, OLD_LEADER)
    await expiration.run_once()
    assert [m.remote_log_segment_id for m in segments(rlmm)] == [uploading.remote_log_segment_id]
    await log.close()


async def test_this_brokers_own_dangling_upload_is_deleted(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """An upload of this broker that no copy of this process is doing (a failed copy, or
    one cut short by a crash before a restart) can only stay unfinished: deleted at once,
    as Kafka's copy task deletes its own failed upload."""
    log = await leader_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    context = make_context(LocalTieredStorage(str(tmp_path / "remote")), rlmm, NEW_LEADER)
    await started_by(rlmm, log, NEW_LEADER)
    await RLMExpirationTask(context, PARTITION, log).run_once()
    assert segments(rlmm, None) == []
    await log.close()


async def test_another_brokers_dangling_upload_goes_with_retention(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """Kafka's rule: another broker's unfinished upload on the lineage is deleted once
    retention takes it (here by time: the records are from 2023), or once it is below the
    log start offset."""
    log = await leader_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    context = make_context(LocalTieredStorage(str(tmp_path / "remote")), rlmm, NEW_LEADER)
    await RLMCopyTask(context, PARTITION, log, 0).run_once()
    copied = segments(rlmm)
    dangling = [await started_by(rlmm, log, OLD_LEADER, i) for i in (0, 1)]
    await RLMExpirationTask(context, PARTITION, log).run_once()
    assert segments(rlmm, STARTED) == dangling  # within retention: they stay
    # The log start offset passes the first.
    assert log.maybe_increment_log_start_offset(dangling[1].start_offset)
    await RLMExpirationTask(context, PARTITION, log).run_once()
    assert segments(rlmm, STARTED) == dangling[1:]
    assert segments(rlmm) == copied[1:]
    # Retention by time takes everything rolled.
    log.update_config(tiered_config(retention_ms=24 * 3600 * 1000))
    await RLMExpirationTask(context, PARTITION, log).run_once()
    assert segments(rlmm, None) == []
    await log.close()


async def test_a_new_leader_counts_only_finished_segments_still_in_the_tier(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """A segment FINISHED and then deleted (here: while a new leader deleted it) no
    longer holds its records: a leader must copy them again, not count them as copied
    (Kafka's highestOffsetForEpoch keeps counting it; only retention deletes a segment
    there, so its records are gone below the log start offset anyway)."""
    log = await leader_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    context = make_context(LocalTieredStorage(str(tmp_path / "remote")), rlmm, NEW_LEADER)
    late = await started_by(rlmm, log, OLD_LEADER)
    await update(rlmm, late, FINISHED, OLD_LEADER)
    assert find_highest_remote_offset(rlmm, PARTITION, log) == late.end_offset
    await update(rlmm, late, DELETE_STARTED, 3)
    assert find_highest_remote_offset(rlmm, PARTITION, log) == -1
    await RLMCopyTask(context, PARTITION, log, 0).run_once()
    copied = segments(rlmm)
    assert [m.start_offset for m in copied] == [s.base_offset for s in log.segments[:-1]]
    assert all(m.broker_id == NEW_LEADER for m in copied)
    await log.close()
