"""The leader's copy task (Kafka's RLMCopyTask) on real logs, a LocalTieredStorage and
the in-memory metadata manager: what it copies and in which order, where a new leader
continues, retries, and what a truncation during an upload leaves."""

from __future__ import annotations

import asyncio
import itertools
import os
from dataclasses import replace
from pathlib import Path

from rlm_support import (
    BASE_TS,
    PARTITION,
    STARTED,
    FlakyStorage,
    commit,
    committed_log,
    make_context,
    open_log,
    produce,
    segments,
    tiered_config,
)

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from tiercel.protocol.end_txn_marker import ControlRecordType, EndTransactionMarker
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.log_transactions import end_txn_marker_append_batch
from tiercel.storage.log_validator import validate_records
from tiercel.storage.producer_append_info import AppendOrigin
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.rlm_copy_task import RLMCopyTask
from tiercel.tiered.rlm_expiration_task import RLMExpirationTask, delete_remote_log_segment
from tiercel.tiered.rlm_task import RetryBackoff
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.object_layout import MANIFEST_SUFFIX
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


def ends(log: UnifiedLog) -> list[tuple[int, int]]:
    """(base, last offset) of each rolled segment."""
    s = log.segments
    return [(a.base_offset, b.base_offset - 1) for a, b in itertools.pairwise(s)]


def manifests(root: Path) -> int:
    return sum(name.endswith(MANIFEST_SUFFIX) for _, _, names in os.walk(root) for name in names)


async def test_copies_rolled_segments_below_the_high_watermark_in_order(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(str(tmp_path / "orders-0"), tiered_config(), scheduler)
    produce(log, 30, epoch=0)
    produce(log, 30, epoch=3)
    rolled = ends(log)
    assert len(rolled) >= 5
    # The HW inside the fourth rolled segment: only the first three are committed.
    log.update_high_watermark(rolled[3][0] + 1)
    await scheduler.drain()  # the producer snapshots taken at the rolls are written
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    task = RLMCopyTask(make_context(rsm, rlmm), PARTITION, log, 3)
    await task.run_once()
    copied = segments(rlmm)
    assert [(m.start_offset, m.end_offset) for m in copied] == rolled[:3]
    assert all(m.end_offset < log.high_watermark for m in copied)
    assert log.highest_offset_in_remote_storage == rolled[2][1] == task.copied_offset
    cache = log.leader_epoch_cache
    for m in copied:
        expected = cache.epoch_entries_in_range(m.start_offset, m.end_offset + 1)
        assert m.segment_leader_epochs == {e.epoch: e.start_offset for e in expected}
        assert m.segment_size_in_bytes == next(
            s.size for s in log.segments if s.base_offset == m.start_offset
        )
    assert manifests(tmp_path / "remote") == 3
    # Everything committed: every rolled segment, never the active one.
    await commit(log, scheduler)
    await task.run_once()
    assert [(m.start_offset, m.end_offset) for m in segments(rlmm)] == rolled
    assert log.active_segment.base_offset > segments(rlmm)[-1].end_offset
    assert {3} <= {e for m in segments(rlmm) for e in m.segment_leader_epochs}
    await log.close()


async def test_a_new_leader_continues_on_its_own_lineage(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """KIP-405's follower -> leader case: the old leader (epoch 0) copied records past
    where the new leader's epoch 0 ends (they were never committed); the new leader
    continues right after its own epoch-0 end, re-uploading none of the old leader's
    finished segments it shares and leaving no gap."""
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    old = open_log(str(tmp_path / "a" / "orders-0"), tiered_config(), scheduler)
    produce(old, 40, epoch=0)
    await commit(old, scheduler)
    await RLMCopyTask(make_context(rsm, rlmm, broker_id=1), PARTITION, old, 0).run_once()
    by_old = segments(rlmm)
    old_end = by_old[-1].end_offset
    # The new leader has epoch 0 only up to the third of the old leader's segments'
    # end, then writes in epoch 1.
    shared_end = by_old[2].end_offset
    new = open_log(str(tmp_path / "b" / "orders-0"), tiered_config(segment_bytes=1500), scheduler)
    while new.log_end_offset <= shared_end:
        produce(new, 1, epoch=0, records=1)
    assert new.log_end_offset == shared_end + 1
    produce(new, 40, epoch=1)
    await commit(new, scheduler)
    assert old_end > shared_end
    task = RLMCopyTask(make_context(rsm, rlmm, broker_id=2), PARTITION, new, 1)
    await task.run_once()
    mine = [m for m in segments(rlmm) if m.broker_id == 2]
    assert mine, "the new leader copied nothing"
    # Its first upload holds shared_end + 1 (the first offset it must add) ...
    assert mine[0].start_offset <= shared_end + 1 <= mine[0].end_offset
    # ... and its uploads are contiguous up to its last rolled segment.
    for a, b in itertools.pairwise(mine):
        assert b.start_offset == a.end_offset + 1
    assert mine[-1].end_offset == new.active_segment.base_offset - 1
    # The old leader's shared uploads were not redone.
    assert all(m.start_offset > by_old[2].start_offset for m in mine)
    assert new.highest_offset_in_remote_storage == mine[-1].end_offset
    await old.close()
    await new.close()


async def test_a_new_leader_refuses_a_remote_log_start_past_its_high_watermark(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """The old leader's retention deleted the first remote segments; the new leader's
    HW is below the remote tier's first offset. Kafka's maybeIncrementLogStartOffset
    refuses the move: the round copies nothing and retries until the HW passes it.
    Before, the log start was clamped to the HW, below the remote tier's start."""
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    old = open_log(str(tmp_path / "a" / "orders-0"), tiered_config(), scheduler)
    produce(old, 40)
    await commit(old, scheduler)
    await RLMCopyTask(make_context(rsm, rlmm, broker_id=1), PARTITION, old, 0).run_once()
    by_old = segments(rlmm)
    context = make_context(rsm, rlmm, broker_id=2)
    for metadata in by_old[:3]:
        await delete_remote_log_segment(context, metadata)
    remote_start = by_old[3].start_offset
    new = open_log(str(tmp_path / "b" / "orders-0"), tiered_config(), scheduler)
    produce(new, 40)
    new.update_high_watermark(remote_start - 1)
    await scheduler.drain()
    task = RLMCopyTask(context, PARTITION, new, 1)
    assert not await task.run_guarded()
    assert (new.log_start_offset, task.copied_offset) == (0, None)
    await commit(new, scheduler)
    assert await task.run_guarded()
    assert new.log_start_offset == remote_start
    assert task.copied_offset == by_old[-1].end_offset
    await old.close()
    await new.close()


async def test_a_failed_copy_is_retried_with_backoff_and_leaves_its_started_metadata(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = await committed_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm = FlakyStorage(LocalTieredStorage(str(tmp_path / "remote")), failures=2)
    task = RLMCopyTask(make_context(rsm, rlmm), PARTITION, log, 0)
    assert not await task.run_guarded()
    assert not await task.run_guarded()
    assert task.failures == 2
    assert task.backlog_bytes == sum(s.size for s in log.segments[:-1])
    assert log.highest_offset_in_remote_storage == -1  # nothing deletable locally yet
    assert len(segments(rlmm, STARTED)) == 2  # one orphan per failed attempt
    assert await task.run_guarded()
    assert task.failures == 0 and task.backlog_bytes == 0
    assert [m.start_offset for m in segments(rlmm)] == [s.base_offset for s in log.segments[:-1]]
    await log.close()


def test_retry_backoff_grows_exponentially_with_jitter_up_to_the_maximum() -> None:
    backoff = RetryBackoff(100, 1000, 0.2)
    for failures, base in ((1, 100), (2, 200), (3, 400), (4, 800), (5, 1000), (30, 1000)):
        waits = [backoff.backoff_ms(failures) for _ in range(50)]
        assert all(base * 0.8 <= w <= base * 1.2 for w in waits)
        assert len(set(waits)) > 1
    assert backoff.backoff_ms(0) == 0


async def test_a_truncation_during_an_upload_abandons_the_copy(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """Leadership lost mid-upload: the log is truncated while the copier thread holds
    the segment's files. The upload's metadata stays COPY_SEGMENT_STARTED (to be deleted
    as an orphan), never FINISHED, and the highest remote offset does not move."""
    log = await committed_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm = FlakyStorage(LocalTieredStorage(str(tmp_path / "remote")))
    started, release = rsm.hold_copies()
    task = RLMCopyTask(make_context(rsm, rlmm), PARTITION, log, 0)
    # The copy either fails (the truncation removed a file it reads) or finishes its
    # upload; both leave the metadata unfinished.
    copying = asyncio.create_task(task.run_guarded())
    assert await asyncio.to_thread(started.wait, 10)
    first = log.segments[0]
    log.truncate_to(first.base_offset + 1)
    release.set()
    await copying
    assert segments(rlmm) == []
    assert [m.start_offset for m in segments(rlmm, STARTED)] == [first.base_offset]
    assert log.highest_offset_in_remote_storage == -1
    await log.close()


async def test_the_expiration_task_never_takes_a_copy_in_progress_for_an_orphan(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """A topic-based metadata manager shows a new segment before its write returns: an
    expiration round run right then must leave the copy alone."""
    log = await committed_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    context = make_context(LocalTieredStorage(str(tmp_path / "remote")), rlmm)
    expiration = RLMExpirationTask(context, PARTITION, log)
    add = rlmm.add_remote_log_segment_metadata

    async def add_then_expire(metadata: RemoteLogSegmentMetadata) -> None:
        await add(metadata)
        await expiration.run_once()

    rlmm.add_remote_log_segment_metadata = add_then_expire  # type: ignore[method-assign]
    await RLMCopyTask(context, PARTITION, log, 0).run_once()
    assert [m.start_offset for m in segments(rlmm)] == [s.base_offset for s in log.segments[:-1]]
    await log.close()


async def test_a_copy_waiting_to_record_finished_is_no_orphan(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """The upload has returned but COPY_SEGMENT_FINISHED is not recorded yet (the
    metadata partition's leader died and the write is retried): an expiration round run
    then must leave the segment alone, as Kafka keeps it in segmentIdsBeingCopied until
    copyLogSegment returns. Deleting it would leave a hole in the remote tier below the
    highest remote offset the copy then records."""
    log = await committed_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    context = make_context(LocalTieredStorage(str(tmp_path / "remote")), rlmm)
    expiration = RLMExpirationTask(context, PARTITION, log)
    update = rlmm.update_remote_log_segment_metadata

    async def expire_then_update(metadata: RemoteLogSegmentMetadataUpdate) -> None:
        if metadata.state == FINISHED:  # the copy's, not the expiration's own deletes
            await expiration.run_once()
        await update(metadata)

    rlmm.update_remote_log_segment_metadata = expire_then_update  # type: ignore[method-assign]
    await RLMCopyTask(context, PARTITION, log, 0).run_once()
    rolled = [s.base_offset for s in log.segments[:-1]]
    assert [m.start_offset for m in segments(rlmm)] == rolled
    assert manifests(tmp_path / "remote") == len(rolled)
    assert context.segment_ids_being_copied == set()
    await log.close()


async def test_an_upload_a_new_leader_deleted_meanwhile_removes_its_objects(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """This broker lost leadership during an upload; the new leader took the
    COPY_SEGMENT_STARTED segment for an orphan and deleted it (DELETE_SEGMENT_STARTED,
    the storage manager's delete, DELETE_SEGMENT_FINISHED) before the upload wrote its
    last objects. COPY_SEGMENT_FINISHED is refused; the objects written after that
    deletion must not stay in the tier for good (a listing would show a complete upload
    no metadata knows)."""
    log = await committed_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    context = make_context(LocalTieredStorage(str(tmp_path / "remote")), rlmm)
    update = rlmm.update_remote_log_segment_metadata

    async def deleted_by_the_new_leader(metadata: RemoteLogSegmentMetadataUpdate) -> None:
        if metadata.state == FINISHED:
            for state in (DELETE_STARTED, DELETE_FINISHED):
                await update(replace(metadata, state=state, broker_id=9))
        await update(metadata)

    rlmm.update_remote_log_segment_metadata = deleted_by_the_new_leader  # type: ignore[method-assign]
    task = RLMCopyTask(context, PARTITION, log, 0)
    assert not await task.run_guarded()
    assert segments(rlmm, None) == []
    assert [p for p in (tmp_path / "remote").rglob("*") if p.is_file()] == []
    assert log.highest_offset_in_remote_storage == -1
    await log.close()


async def test_an_upload_cancelled_meanwhile_removes_its_objects(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """The broker stops (the copy task is cancelled) during an upload, which its thread
    finishes regardless: a new leader may have deleted the COPY_SEGMENT_STARTED orphan
    before the upload wrote its last objects, so the upload removes them itself."""
    log = await committed_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm = FlakyStorage(LocalTieredStorage(str(tmp_path / "remote")))
    started, release = rsm.hold_copies()
    context = make_context(rsm, rlmm)
    copying = asyncio.create_task(RLMCopyTask(context, PARTITION, log, 0).run_once())
    assert await asyncio.to_thread(started.wait, 10)
    copying.cancel()
    release.set()
    for _ in range(200):  # until the upload's thread has returned
        if not context.segment_ids_being_copied:
            break
        await asyncio.sleep(0.01)
    assert context.segment_ids_being_copied == set()
    assert [p for p in (tmp_path / "remote").rglob("*") if p.is_file()] == []
    assert [m.start_offset for m in segments(rlmm, STARTED)] == [0]
    await log.close()


async def test_a_segment_waits_for_its_producer_snapshot_and_uploads_it(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(str(tmp_path / "orders-0"), tiered_config(), scheduler)
    produce(log, 20)
    log.update_high_watermark(log.log_end_offset)
    rlmm = InMemoryRemoteLogMetadataManager()
    task = RLMCopyTask(
        make_context(LocalTieredStorage(str(tmp_path / "remote")), rlmm), PARTITION, log, 0
    )
    await task.run_once()  # the snapshots taken at the rolls are still being written
    assert segments(rlmm, None) == []
    await scheduler.drain()
    await task.run_once()
    copied = segments(rlmm)
    assert len(copied) == len(log.segments) - 1
    snapshots = {p.name.split("-")[0] for p in (tmp_path / "remote").rglob("*.snapshot")}
    assert snapshots == {f"{m.start_offset:020d}" for m in copied}
    await log.close()


async def test_segments_are_copied_only_below_the_last_stable_offset(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """Kafka's candidateLogSegments takes the last stable offset, not the high
    watermark: a segment holding an undecided transaction's records stays local until
    the transaction's marker is committed (the remote tier has no LSO to hold readers)."""
    log = open_log(str(tmp_path / "orders-0"), tiered_config(), scheduler)
    produce(log, 10)
    open_at = log.log_end_offset
    values = [SimpleRecord(b"k", b"%08d" % i * 4, timestamp=BASE_TS) for i in range(2)]
    batch = build_record_batch(
        values, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    log.append_as_leader(validate_records(batch, log.config, BASE_TS), 0, BASE_TS)
    produce(log, 30)
    await commit(log, scheduler)
    assert log.last_stable_offset == open_at < log.high_watermark
    rlmm = InMemoryRemoteLogMetadataManager()
    task = RLMCopyTask(
        make_context(LocalTieredStorage(str(tmp_path / "r")), rlmm), PARTITION, log, 0
    )
    await task.run_once()
    below = [(b, e) for b, e in ends(log) if e < open_at]
    assert [(m.start_offset, m.end_offset) for m in segments(rlmm)] == below
    # The marker decides it: everything rolled is copied.
    marker = end_txn_marker_append_batch(
        EndTransactionMarker(ControlRecordType.COMMIT, 0), 7, 0, log.log_end_offset, 0,
        log.config, BASE_TS,
    )  # fmt: skip
    log.append([marker], AppendOrigin.COORDINATOR)
    produce(log, 10)
    await commit(log, scheduler)
    await task.run_once()
    assert [(m.start_offset, m.end_offset) for m in segments(rlmm)] == ends(log)
    await log.close()


async def test_segments_record_whether_their_transaction_index_is_empty(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """KIP-1058: each upload's metadata says whether the segment indexed an abort, so
    read_committed remote fetches pass over the others without fetching their indexes."""
    log = open_log(str(tmp_path / "orders-0"), tiered_config(), scheduler)
    produce(log, 10)
    values = [SimpleRecord(b"k", b"%08d" % i * 4, timestamp=BASE_TS) for i in range(2)]
    batch = build_record_batch(
        values, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    log.append_as_leader(validate_records(batch, log.config, BASE_TS), 0, BASE_TS)
    marker = end_txn_marker_append_batch(
        EndTransactionMarker(ControlRecordType.ABORT, 0), 7, 0, log.log_end_offset, 0,
        log.config, BASE_TS,
    )  # fmt: skip
    abort_offset = log.log_end_offset
    log.append([marker], AppendOrigin.COORDINATOR)
    produce(log, 30)
    await commit(log, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    task = RLMCopyTask(
        make_context(LocalTieredStorage(str(tmp_path / "r")), rlmm), PARTITION, log, 0
    )
    await task.run_once()
    copied = segments(rlmm)
    assert len(copied) == len(ends(log)) >= 3
    with_abort = [m for m in copied if not m.txn_idx_empty]
    assert [(m.start_offset <= abort_offset <= m.end_offset) for m in with_abort] == [True]
    await log.close()
