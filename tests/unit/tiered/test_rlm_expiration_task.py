"""Total retention over the remote tier (Kafka's RLMExpirationTask) and local retention
on a tiered log, on real logs, a LocalTieredStorage and the in-memory metadata manager."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from rlm_support import (
    PARTITION,
    STARTED,
    FlakyStorage,
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
from tiercel.tiered.rlm_copy_task import RLMCopyTask
from tiercel.tiered.rlm_expiration_task import RLMExpirationTask
from tiercel.tiered.rlm_follower_task import RLMFollowerTask
from tiercel.tiered.rlm_task import RLMContext
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import RemoteLogSegmentState


def remote_files(root: Path) -> set[str]:
    return {name for _, _, names in os.walk(root) for name in names}


async def tiered_log(
    tmp_path: Path, scheduler: Scheduler, rsm: object = None, **config: object
) -> tuple[UnifiedLog, InMemoryRemoteLogMetadataManager, RLMContext]:
    """A leader's log of ~10 rolled segments, all committed and copied."""
    log = open_log(str(tmp_path / "orders-0"), tiered_config(**config), scheduler)
    produce(log, 40)
    await commit(log, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    storage = rsm or LocalTieredStorage(str(tmp_path / "remote"))
    context = make_context(storage, rlmm)  # type: ignore[arg-type]
    await RLMCopyTask(context, PARTITION, log, 0).run_guarded()
    return log, rlmm, context


async def test_local_retention_deletes_only_copied_segments_and_moves_only_the_local_start(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(str(tmp_path / "orders-0"), tiered_config(local_retention_bytes=1), scheduler)
    produce(log, 40)
    await commit(log, scheduler)
    rolled = [s.base_offset for s in log.segments]
    # Nothing copied yet: local retention keeps everything.
    assert log.delete_old_segments() == 0
    log.update_highest_offset_in_remote_storage(rolled[3] - 1)  # three segments copied
    assert log.delete_old_segments() == 3
    assert [s.base_offset for s in log.segments] == rolled[3:]
    assert (log.log_start_offset, log.local_log_start_offset) == (0, rolled[3])
    # Without the remote tier the same config deletes by retention.bytes (-1: nothing).
    plain = open_log(
        str(tmp_path / "plain" / "orders-0"),
        tiered_config(local_retention_bytes=1),
        scheduler,
        remote=False,
    )
    produce(plain, 40)
    await commit(plain, scheduler)
    assert plain.delete_old_segments() == 0
    await log.close()
    await plain.close()


async def test_a_reload_keeps_the_log_start_offset_below_the_local_start(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(str(tmp_path / "orders-0"), tiered_config(local_retention_bytes=1), scheduler)
    produce(log, 40)
    await commit(log, scheduler)
    log.update_highest_offset_in_remote_storage(log.segments[3].base_offset - 1)
    log.delete_old_segments()
    local_start = log.local_log_start_offset
    await log.close()
    await scheduler.drain()  # the deleted segments' files are gone before the reload
    # The log-start-offset checkpoint says 0: with a remote tier it stands.
    again = open_log(log.dir, tiered_config(local_retention_bytes=1), scheduler, log_start_offset=0)
    assert (again.log_start_offset, again.local_log_start_offset) == (0, local_start)
    await again.close()
    plain = open_log(log.dir, tiered_config(), scheduler, log_start_offset=0, remote=False)
    assert (plain.log_start_offset, plain.local_log_start_offset) == (local_start, local_start)
    await plain.close()


async def test_truncate_fully_keeps_a_log_start_offset_below_the_new_local_start(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(str(tmp_path / "orders-0"), tiered_config(), scheduler)
    log.truncate_fully_and_start_at(500, log_start_offset=120)
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (120, 500, 500)
    await log.close()


async def test_total_retention_by_size_deletes_remote_segments_and_advances_the_log_start(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log, rlmm, context = await tiered_log(tmp_path, scheduler)
    copied = segments(rlmm)
    total = sum(m.segment_size_in_bytes for m in copied) + log.active_segment.size
    # Keep all but the first three segments' bytes.
    keep = total - sum(m.segment_size_in_bytes for m in copied[:3])
    log.update_config(tiered_config(retention_bytes=keep))
    await RLMExpirationTask(context, PARTITION, log).run_once()
    assert segments(rlmm) == copied[3:]
    assert log.log_start_offset == copied[3].start_offset
    # The deleted segments' objects are gone from the store; the rest remain.
    names = remote_files(tmp_path / "remote")
    assert len([n for n in names if n.endswith("manifest.json")]) == len(copied) - 3
    await log.close()


async def test_retention_past_the_high_watermark_deletes_nothing_until_it_moves(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """Kafka's maybeIncrementLogStartOffset refuses a log start past the HW (a new
    leader's, not caught up yet): the round deletes nothing and is retried. Before, the
    log start was clamped to the HW and every expired segment deleted, leaving the log
    start inside the deleted range."""
    log, rlmm, context = await tiered_log(tmp_path, scheduler)
    copied = segments(rlmm)
    log.update_config(tiered_config(retention_ms=60_000))  # every remote segment expires
    log.update_high_watermark(copied[2].start_offset)
    task = RLMExpirationTask(context, PARTITION, log)
    assert not await task.run_guarded()
    assert segments(rlmm) == copied and log.log_start_offset == 0
    await commit(log, scheduler)
    assert await task.run_guarded()
    assert segments(rlmm) == [] and log.log_start_offset == copied[-1].end_offset + 1
    await log.close()


async def test_total_retention_by_time_uses_the_segments_max_timestamp(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log, rlmm, context = await tiered_log(tmp_path, scheduler)
    log.update_config(tiered_config(retention_ms=60_000))  # the records are from 2023
    await RLMExpirationTask(context, PARTITION, log).run_once()
    assert segments(rlmm) == []
    assert log.log_start_offset == log.highest_offset_in_remote_storage + 1
    assert log.log_start_offset == log.active_segment.base_offset
    await log.close()


async def test_delete_records_below_the_remote_start_deletes_remote_and_local_segments(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log, rlmm, context = await tiered_log(tmp_path, scheduler)
    copied = segments(rlmm)
    target = copied[4].start_offset + 1  # inside the fifth segment
    assert log.maybe_increment_log_start_offset(target)
    assert log.local_log_start_offset == target
    await RLMExpirationTask(context, PARTITION, log).run_once()
    assert segments(rlmm) == copied[4:]
    assert log.delete_old_segments() == 4
    assert log.segments[0].base_offset == copied[4].start_offset
    assert log.log_start_offset == target
    await log.close()


async def test_an_orphaned_started_copy_is_deleted_through_the_delete_states(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    rsm = FlakyStorage(LocalTieredStorage(str(tmp_path / "remote")), failures=1)
    log, rlmm, context = await tiered_log(tmp_path, scheduler, rsm=rsm)
    # The first copy failed: its STARTED metadata stays and nothing was copied.
    [orphan] = segments(rlmm, STARTED)
    assert segments(rlmm) == []
    updates: list[RemoteLogSegmentState] = []
    update = rlmm.update_remote_log_segment_metadata

    async def record(u):  # type: ignore[no-untyped-def]
        updates.append(u.state)
        await update(u)

    rlmm.update_remote_log_segment_metadata = record  # type: ignore[method-assign]
    await RLMExpirationTask(context, PARTITION, log).run_once()
    assert segments(rlmm, None) == []
    assert updates == [
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
        RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
    ]
    assert orphan.start_offset == 0
    await log.close()


async def test_segments_off_the_leader_epoch_lineage_are_deleted(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """An unclean election's leftovers (KIP-405): an old leader's uploads of epoch 0
    past where this log's epoch 0 ends (it became leader in epoch 1 without them)."""
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    old = open_log(str(tmp_path / "a" / "orders-0"), tiered_config(), scheduler)
    produce(old, 40, epoch=0)
    await commit(old, scheduler)
    await RLMCopyTask(make_context(rsm, rlmm, 1), PARTITION, old, 0).run_once()
    by_old = segments(rlmm)
    new = open_log(str(tmp_path / "b" / "orders-0"), tiered_config(), scheduler)
    while new.log_end_offset <= by_old[1].end_offset:
        produce(new, 1, epoch=0, records=1)
    produce(new, 40, epoch=1)
    await commit(new, scheduler)
    context = make_context(rsm, rlmm, 2)
    await RLMCopyTask(context, PARTITION, new, 1).run_once()
    await RLMExpirationTask(context, PARTITION, new).run_once()
    left = segments(rlmm)
    assert {m.remote_log_segment_id for m in by_old[2:]}.isdisjoint(
        m.remote_log_segment_id for m in left
    )
    assert [m.remote_log_segment_id for m in left[:2]] == [
        m.remote_log_segment_id for m in by_old[:2]
    ]
    await old.close()
    await new.close()


async def test_an_off_lineage_segment_holding_the_only_copy_of_lineage_records_stays(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """KIP-405 scenario 3: the new leader's epoch 0 ends inside an old leader's segment,
    where its own segments roll. It counts that segment's epoch-0 prefix as copied
    (findHighestRemoteOffset caps the epoch's highest remote offset at the epoch's end)
    and copies only from its epoch 1 on, so the segment, off its lineage past the
    prefix, is the only remote copy of the prefix: it stays. The old leader's later
    segments, with no record of this lineage, go."""
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    old = open_log(str(tmp_path / "a" / "orders-0"), tiered_config(), scheduler)
    produce(old, 40, epoch=0)
    await commit(old, scheduler)
    await RLMCopyTask(make_context(rsm, rlmm, 1), PARTITION, old, 0).run_once()
    by_old = segments(rlmm)
    split = by_old[1].start_offset + 1  # where the new leader's epoch 1 starts
    new = open_log(str(tmp_path / "b" / "orders-0"), tiered_config(), scheduler)
    while new.log_end_offset < split:
        produce(new, 1, epoch=0, records=1)
    new.roll()
    produce(new, 40, epoch=1)
    await commit(new, scheduler)
    context = make_context(rsm, rlmm, 2)
    await RLMCopyTask(context, PARTITION, new, 1).run_once()
    by_new = [m for m in segments(rlmm) if m.broker_id == 2]
    assert by_new[0].start_offset == split  # the prefix below was not copied again
    await RLMExpirationTask(context, PARTITION, new).run_once()
    left = {m.remote_log_segment_id for m in segments(rlmm)}
    assert {m.remote_log_segment_id for m in by_old[:2]} <= left
    assert left.isdisjoint(m.remote_log_segment_id for m in by_old[2:])
    await old.close()
    await new.close()


async def test_the_follower_task_tracks_the_highest_remote_offset(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log, _rlmm, context = await tiered_log(tmp_path, scheduler)
    follower = open_log(str(tmp_path / "f" / "orders-0"), tiered_config(), scheduler)
    produce(follower, 40)
    await RLMFollowerTask(context, PARTITION, follower).run_once()
    assert follower.highest_offset_in_remote_storage == log.highest_offset_in_remote_storage
    await log.close()
    await follower.close()


async def test_with_copy_disabled_nothing_is_copied_and_local_retention_is_total_retention(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """remote.log.copy.disable (KIP-950): no copy, and local segments obey retention.*
    (they are not in the remote tier), moving the log start offset itself."""
    config = tiered_config(remote_log_copy_disable="true", local_retention_bytes=1)
    log = open_log(str(tmp_path / "orders-0"), config, scheduler)
    produce(log, 40)
    await commit(log, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    context = make_context(LocalTieredStorage(str(tmp_path / "remote")), rlmm)
    await RLMCopyTask(context, PARTITION, log, 0).run_once()
    assert segments(rlmm, None) == []
    assert log.delete_old_segments() == 0  # retention.bytes is -1: keep everything
    keep = log.size - sum(s.size for s in log.segments[:2])
    log.update_config(tiered_config(remote_log_copy_disable="true", retention_bytes=keep))
    second = log.segments[2].base_offset
    assert log.delete_old_segments() == 2
    assert (log.log_start_offset, log.local_log_start_offset) == (second, second)
    await log.close()


async def test_a_copy_whose_finished_update_is_in_flight_is_no_orphan(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """The topic-based metadata manager's FINISHED update takes a round trip through
    __remote_log_metadata after the upload returned. An expiration round meanwhile must
    not take the STARTED segment for an orphan and delete an upload that is about to
    be FINISHED (local retention would then drop the only copy of its records)."""
    log = open_log(str(tmp_path / "orders-0"), tiered_config(), scheduler)
    produce(log, 40)
    await commit(log, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    context = make_context(LocalTieredStorage(str(tmp_path / "remote")), rlmm)
    release = asyncio.Event()
    in_flight = asyncio.Event()
    update = rlmm.update_remote_log_segment_metadata

    async def slow(u):  # type: ignore[no-untyped-def]
        if u.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            in_flight.set()
            await release.wait()
        await update(u)

    rlmm.update_remote_log_segment_metadata = slow  # type: ignore[method-assign]
    copy = asyncio.create_task(RLMCopyTask(context, PARTITION, log, 0).run_once())
    await asyncio.wait_for(in_flight.wait(), 10)
    [copying] = segments(rlmm, STARTED)
    await RLMExpirationTask(context, PARTITION, log).run_once()
    assert segments(rlmm, STARTED) == [copying]
    release.set()
    await asyncio.wait_for(copy, 10)
    assert copying.remote_log_segment_id in {m.remote_log_segment_id for m in segments(rlmm)}
    await log.close()


async def test_a_tiered_log_truncated_at_its_local_start_keeps_what_is_remote(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """A failover that truncates a tiered log exactly to its local start (its only local
    segment begins there; everything past it unreplicated) must not restart the log
    there: the records below are remote, so the log start offset and the epochs below
    stay (Kafka truncates fully only below the first segment). Restarting it made them
    out of range here, and this broker's expiration task, once leader, deleted them all
    from the tier as 'below the log start'."""
    log = open_log(str(tmp_path / "orders-0"), tiered_config(local_retention_bytes=1), scheduler)
    produce(log, 40, epoch=0)
    await commit(log, scheduler)
    local_start = log.segments[-1].base_offset
    log.update_highest_offset_in_remote_storage(local_start - 1)
    log.roll()
    log.delete_old_segments()
    assert (log.log_start_offset, log.local_log_start_offset) == (0, local_start)
    produce(log, 3, epoch=1)  # unreplicated: the new leader has none of it
    assert log.truncate_to(local_start)
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (
        0,
        local_start,
        local_start,
    )
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(0, 0)]
    await log.close()
