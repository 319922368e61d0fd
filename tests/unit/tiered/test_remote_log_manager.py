"""The RemoteLogManager's lifecycle on real logs: leader tasks started on leadership,
restarted only on a new epoch, swapped for a follower task, stopped (and the remote
data deleted with the topic), and its copy quota."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rlm_support import (
    PARTITION,
    STARTED,
    FlakyStorage,
    committed_log,
    make_context,
    rlm_config,
    segments,
)

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from tiercel.storage.scheduler import Scheduler
from tiercel.tiered.remote_log_manager import RemoteLogManager
from tiercel.tiered.rlm_copy_task import RLMCopyTask
from tiercel.tiered.rlm_expiration_task import delete_remote_log_segment
from tiercel.tiered.rlm_follower_task import RLMFollowerTask
from tiercel.tiered.rlm_quota import RLMQuota
from tiercel.tiered.rlmm.remote_log_metadata_manager import (
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage


async def eventually(condition: object, timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def test_leader_tasks_copy_then_give_way_to_a_follower_task(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = await committed_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    rlm = RemoteLogManager(rlm_config(), 1, LocalTieredStorage(str(tmp_path / "remote")), rlmm)
    rlm.on_leadership_change({PARTITION: (log, 0)}, {})
    rolled = len(log.segments) - 1
    await eventually(lambda: len(segments(rlmm)) == rolled)
    assert rlm.copy_backlog_bytes(PARTITION) == 0
    copy = rlm.task(PARTITION, RLMCopyTask)
    rlm.on_leadership_change({PARTITION: (log, 0)}, {})  # the same epoch: kept
    assert rlm.task(PARTITION, RLMCopyTask) is copy
    rlm.on_leadership_change({PARTITION: (log, 1)}, {})  # a new epoch: restarted
    assert rlm.task(PARTITION, RLMCopyTask) is not copy and copy is not None
    assert copy.cancelled
    rlm.on_leadership_change({}, {PARTITION: log})
    assert rlm.task(PARTITION, RLMCopyTask) is None
    assert rlm.task(PARTITION, RLMFollowerTask) is not None
    rlm.stop_partitions({PARTITION}, delete_remote=False)
    assert rlm.partitions == set()
    assert len(segments(rlmm)) == rolled  # stopping deletes nothing
    await rlm.close()
    await log.close()


class PartitionDeletesRecorded(InMemoryRemoteLogMetadataManager):
    """The in-memory manager, recording the partition delete markers written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.partition_deletes: list[RemotePartitionDeleteState] = []

    async def put_remote_partition_delete_metadata(
        self, metadata: RemotePartitionDeleteMetadata
    ) -> None:
        self.partition_deletes.append(metadata.state)
        await super().put_remote_partition_delete_metadata(metadata)


async def test_stopping_with_delete_remote_deletes_the_partitions_remote_segments(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """As Kafka's deleteRemoteLogPartition: every segment through the DELETE_SEGMENT
    states and no partition delete markers, whose DELETE_PARTITION_FINISHED would end
    the partition's metadata for good when its topic is tiered again (KIP-950's
    disable, then enable). The log, still here, has nothing remote any more; tiered
    again, it copies from scratch."""
    log = await committed_log(tmp_path, scheduler)
    rlmm = PartitionDeletesRecorded()
    remote = tmp_path / "remote"
    rlm = RemoteLogManager(rlm_config(), 1, LocalTieredStorage(str(remote)), rlmm)
    rlm.on_leadership_change({PARTITION: (log, 0)}, {})
    rolled = len(log.segments) - 1
    await eventually(lambda: len(segments(rlmm)) == rolled)
    copied = log.highest_offset_in_remote_storage
    rlm.stop_partitions({PARTITION}, delete_remote=True)
    await eventually(lambda: log.highest_offset_in_remote_storage == -1)
    assert segments(rlmm, None) == [] and rlmm.partition_deletes == []
    assert not [p for p in remote.rglob("*") if p.is_file()]
    rlm.on_leadership_change({PARTITION: (log, 0)}, {})
    await eventually(lambda: len(segments(rlmm)) == rolled)
    assert log.highest_offset_in_remote_storage == copied
    await rlm.close()
    await log.close()


async def test_a_partition_tiered_again_during_its_remote_deletion_starts_after_it(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """Kafka deletes a partition's remote data within the config change that turned
    tiering off, before it applies the next one. Tasks started meanwhile here would copy
    beside the deletion, and the deletion's end would take the partition from the
    metadata manager under them."""
    log = await committed_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm = FlakyStorage(LocalTieredStorage(str(tmp_path / "remote")))
    rlm = RemoteLogManager(rlm_config(), 1, rsm, rlmm)  # type: ignore[arg-type]
    rlm.on_leadership_change({PARTITION: (log, 0)}, {})
    rolled = len(log.segments) - 1
    await eventually(lambda: len(segments(rlmm)) == rolled)
    started, release = rsm.hold_deletes()
    rlm.stop_partitions({PARTITION}, delete_remote=True)
    assert await asyncio.to_thread(started.wait, 10)
    rlm.on_leadership_change({PARTITION: (log, 0)}, {})  # tiering turned on again
    assert rlm.partitions == set()
    rsm.before_delete = lambda: None
    release.set()

    def reconcile() -> bool:  # the broker's periodic pass, until the deletion has ended
        rlm.on_leadership_change({PARTITION: (log, 0)}, {})
        return rlm.partitions == {PARTITION}

    await eventually(reconcile)
    await eventually(lambda: len(segments(rlmm)) == rolled)
    await rlm.close()
    await log.close()


async def test_a_new_leader_takes_the_log_start_offset_of_the_remote_tier(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """The old leader's retention deleted its first remote segments; this replica's log
    start offset (0) lags: on becoming leader it moves to the first remote segment."""
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    log = await committed_log(tmp_path, scheduler)
    context = make_context(rsm, rlmm)
    await RLMCopyTask(context, PARTITION, log, 0).run_once()
    first, second = segments(rlmm)[:2]
    await delete_remote_log_segment(context, first)
    assert log.log_start_offset == 0
    await RLMCopyTask(context, PARTITION, log, 1).run_once()
    assert log.log_start_offset == second.start_offset
    await log.close()


async def test_the_copy_quota_bounds_bytes_per_second() -> None:
    now = [0.0]
    quota = RLMQuota(1000, clock=lambda: now[0])
    assert quota.throttle_time_s(600) == 0
    quota.record(600)
    assert quota.throttle_time_s(600) == 0.2  # 400 tokens left, 600 needed
    quota.record(600)  # a segment may drive the bucket negative ...
    assert quota.throttle_time_s(100) == 0.3  # ... the next waits until it is repaid
    now[0] = 0.3
    assert quota.throttle_time_s(100) == 0
    # A segment larger than a second's worth waits for a full bucket, not forever.
    now[0] = 10.0
    assert quota.throttle_time_s(5000) == 0


async def test_an_upload_cut_short_by_a_leadership_change_leaves_no_metadata(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """This broker stops leading while an upload runs: the upload's thread deletes what
    it wrote, then its COPY_SEGMENT_STARTED metadata goes through the DELETE states
    (the next leader leaves another broker's unfinished upload alone, so it would stay
    for good). A stop of the whole manager leaves it instead (see `stop`)."""
    log = await committed_log(tmp_path, scheduler)
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm = FlakyStorage(LocalTieredStorage(str(tmp_path / "remote")))
    started, release = rsm.hold_copies()
    rlm = RemoteLogManager(rlm_config(), 1, rsm, rlmm)  # type: ignore[arg-type]
    rlm.on_leadership_change({PARTITION: (log, 0)}, {})
    assert await asyncio.to_thread(started.wait, 10)
    assert [m.state for m in segments(rlmm, None)] == [STARTED]
    rlm.on_leadership_change({}, {PARTITION: log})  # another broker leads now
    rsm.before_copy = lambda: None
    release.set()
    await eventually(lambda: segments(rlmm, None) == [])
    assert [p for p in (tmp_path / "remote").rglob("*") if p.is_file()] == []
    await rlm.close()
    await log.close()
