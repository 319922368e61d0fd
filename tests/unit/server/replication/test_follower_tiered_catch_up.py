"""A follower whose leader keeps only the tail locally catches up through the remote tier
(Kafka's ReplicaFetcherTierStateMachine, KIP-405 follower scenarios 1 and 2): told
OFFSET_MOVED_TO_TIERED_STORAGE, it asks EARLIEST_LOCAL, restarts its log at the
leader's local start with the epochs and producer snapshot of the remote segment below
it, then fetches normally; while that segment is unknown here it backs off and retries."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from replication_support import TP, Cluster, InProcessLeader, MakeCluster, epochs, log_bytes, values

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from support.tiering import drop_local_segments_below, tier_rolled_segments
from tiercel.server.replication.fetch_state import FetchPhase, InitialFetchState
from tiercel.server.replication.replica_fetcher import ReplicaFetcher
from tiercel.server.replication.replica_fetcher_tier_state_machine import (
    build_remote_log_aux_state,
)
from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.producer_snapshot import encode_snapshot
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.tiered.remote_index_cache import RemoteIndexCache
from tiercel.tiered.remote_log_reader import RemoteLogReader, RemoteStorageFetchInfo
from tiercel.tiered.remote_storage_thread_pool import RemoteStorageThreadPool
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import IndexType, RemoteLogSegmentMetadata

LOCAL_START = 30


@pytest.fixture
def pool() -> Iterator[RemoteStorageThreadPool]:
    p = RemoteStorageThreadPool("remote-reader-test", threads=1, max_pending_tasks=4)
    yield p
    p.shutdown()


def leader_with_tiered_prefix(make_cluster: MakeCluster) -> Cluster:
    """Broker 1 leads; epochs 0 (offsets 0-14), 2 (15-34) and 3 (35-44) in segments of
    10 records: broker 2 is out of the ISR with an empty log."""
    c = make_cluster(ids=(1, 2))
    c.elect(leader=1, leader_epoch=0, isr=(1,))
    log = c[1].log
    for epoch, batches in ((0, 3), (2, 4), (3, 2)):
        if epoch:
            c.elect(leader=1, leader_epoch=epoch, isr=(1,))
        for _ in range(batches):
            c.produce(1, values(5))
            if log.log_end_offset % 10 == 0:
                log.roll()
    assert log.log_end_offset == 45
    return c


def follower_fetcher(
    c: Cluster, remote: RemoteLogReader, backoff_ms: int = 0
) -> tuple[ReplicaFetcher, InProcessLeader]:
    endpoint = c.endpoint(2)
    fetcher = ReplicaFetcher(
        endpoint, lambda tp: c[2] if tp == TP else None, 1 << 20, backoff_ms, lambda: remote
    )
    state = c[2].state
    fetcher.add_partitions(
        {TP: InitialFetchState(c[2].topic_id, 1, state.leader_epoch, c[2].initial_fetch_offset())}
    )
    return fetcher, endpoint


async def tier(c: Cluster, rsm: LocalTieredStorage, rlmm: InMemoryRemoteLogMetadataManager) -> None:
    log = c[1].log
    snapshots = {LOCAL_START: encode_snapshot([])}
    await tier_rolled_segments(log, rsm, rlmm, snapshots, LOCAL_START, c[1].topic_id)
    drop_local_segments_below(log, LOCAL_START)


async def test_the_follower_restarts_at_the_leaders_local_start_with_its_history(
    make_cluster: MakeCluster, tmp_path: Path, pool: RemoteStorageThreadPool
) -> None:
    c = leader_with_tiered_prefix(make_cluster)
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    rlmm = InMemoryRemoteLogMetadataManager()
    await tier(c, rsm, rlmm)
    reader = RemoteLogReader(rsm, rlmm, RemoteIndexCache(rsm, str(tmp_path / "cache")), pool)
    fetcher, endpoint = follower_fetcher(c, reader)

    await c.catch_up(fetcher, 2)

    leader, follower = c[1].log, c[2].log
    assert (follower.log_start_offset, follower.local_log_start_offset) == (0, LOCAL_START)
    assert follower.log_end_offset == leader.log_end_offset == 45
    assert epochs(follower) == epochs(leader) == [(0, 0), (2, 15), (3, 35)]
    assert log_bytes(follower) == log_bytes(leader)
    assert LOCAL_START in follower.producer_state.snapshot_offsets
    asked = [api for api, _ in endpoint.requests]
    assert asked.count("earliest_local") == 1  # one 109, one catch-up


async def test_an_unknown_remote_segment_backs_off_and_retries(
    make_cluster: MakeCluster, tmp_path: Path, pool: RemoteStorageThreadPool
) -> None:
    c = leader_with_tiered_prefix(make_cluster)
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    rlmm = InMemoryRemoteLogMetadataManager()
    await tier(c, rsm, rlmm)
    empty = InMemoryRemoteLogMetadataManager()  # this broker has not loaded the metadata yet
    cache = RemoteIndexCache(rsm, str(tmp_path / "cache"))
    reader = RemoteLogReader(rsm, empty, cache, pool)
    fetcher, _ = follower_fetcher(c, reader, backoff_ms=20)
    for _ in range(3):
        await fetcher.run_once()
    state = fetcher.fetch_state(TP)
    assert state is not None and state.phase is FetchPhase.FETCHING
    assert state.fetch_offset == 0 and state.delayed_until > 0
    assert c[2].log.log_end_offset == 0  # nothing installed
    reader.rlmm = rlmm
    await asyncio.sleep(0.05)
    await c.catch_up(fetcher, 2)
    assert c[2].log.local_log_start_offset == LOCAL_START
    assert log_bytes(c[2].log) == log_bytes(c[1].log)


class GatedIndexStorage(LocalTieredStorage):
    """A LocalTieredStorage whose index reads wait for ``gate`` (a slow object store)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        self.entered.set()
        self.gate.wait(10)
        return super().fetch_index(metadata, index_type)


async def test_a_rebuild_that_finishes_after_a_leadership_change_installs_nothing(
    make_cluster: MakeCluster, tmp_path: Path, pool: RemoteStorageThreadPool
) -> None:
    """The rebuild awaits requests and a remote read; if this replica becomes the leader
    meanwhile (and takes writes), the rebuild must not then empty its log (Kafka holds
    the fetcher's partitionMapLock throughout)."""
    c = leader_with_tiered_prefix(make_cluster)
    rsm = GatedIndexStorage(str(tmp_path / "remote"))
    rlmm = InMemoryRemoteLogMetadataManager()
    rsm.gate.set()
    await tier(c, rsm, rlmm)
    rsm.gate.clear()
    reader = RemoteLogReader(rsm, rlmm, RemoteIndexCache(rsm, str(tmp_path / "cache")), pool)
    fetcher, _ = follower_fetcher(c, reader)
    rebuild = asyncio.create_task(fetcher.run_once())
    assert await asyncio.get_running_loop().run_in_executor(None, rsm.entered.wait, 10)
    c.elect(leader=2, leader_epoch=4, isr=(2,))
    c.produce(2, values(3))
    before = log_bytes(c[2].log)
    rsm.gate.set()
    await asyncio.wait_for(rebuild, 10)
    assert log_bytes(c[2].log) == before and c[2].log.log_end_offset == 3


class GatedSegmentStorage(LocalTieredStorage):
    """A LocalTieredStorage whose segment reads (a consumer's) wait for ``gate``."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> bytes:
        self.entered.set()
        self.gate.wait(10)
        return super().fetch_log_segment(metadata, start_position, end_position)


async def test_a_rebuild_does_not_wait_behind_consumer_reads_in_the_reader_pool(
    make_cluster: MakeCluster, tmp_path: Path, pool: RemoteStorageThreadPool
) -> None:
    """Kafka's TierStateMachine fetches the epoch checkpoint and producer snapshot on the
    replica fetcher's own thread (RemoteStorageManager.fetchIndex), never through the
    remote reader pool: they neither count against remote.log.reader.max.pending.tasks
    nor wait for its threads. Here every reader thread is held by a consumer's read of a
    slow store; the follower still catches up through the tier meanwhile."""
    c = leader_with_tiered_prefix(make_cluster)
    rsm = GatedSegmentStorage(str(tmp_path / "remote"))
    rlmm = InMemoryRemoteLogMetadataManager()
    await tier(c, rsm, rlmm)
    reader = RemoteLogReader(rsm, rlmm, RemoteIndexCache(rsm, str(tmp_path / "cache")), pool)
    tip = TopicIdPartition(c[1].topic_id, TP)
    consumer_read = reader.async_read(
        RemoteStorageFetchInfo(1024, True, tip, 0), c[1].log.leader_epoch_cache
    )
    assert await asyncio.to_thread(rsm.entered.wait, 10)
    assert pool.in_flight == 1 == pool.threads  # the only reader thread is taken
    fetcher, _ = follower_fetcher(c, reader)
    try:
        await asyncio.wait_for(c.catch_up(fetcher, 2), 5)
        assert c[2].log.local_log_start_offset == LOCAL_START
        assert log_bytes(c[2].log) == log_bytes(c[1].log)
        assert pool.in_flight == 1  # the rebuild took no place in the reader pool's bound
    finally:
        rsm.gate.set()
        await asyncio.wait_for(consumer_read, 10)
        stopped = fetcher.stop()
        if stopped is not None:
            await asyncio.gather(stopped, return_exceptions=True)


async def test_the_rebuilt_epochs_are_on_disk_before_the_rebuild_returns(
    make_cluster: MakeCluster,
    tmp_path: Path,
    pool: RemoteStorageThreadPool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kafka writes the leader-epoch checkpoint synchronously when it rebuilds from the
    tier (LeaderEpochFileCache.clearAndFlush, assign): the follower fetches on only once
    the remote epochs are durable. The checkpoint write is held here; before, the
    rebuild returned with the write still pending, and a crash then loaded a cache
    without the remote epochs."""
    c = leader_with_tiered_prefix(make_cluster)
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    rlmm = InMemoryRemoteLogMetadataManager()
    await tier(c, rsm, rlmm)
    reader = RemoteLogReader(rsm, rlmm, RemoteIndexCache(rsm, str(tmp_path / "cache")), pool)
    follower = c[2]
    checkpoint = follower.log.leader_epoch_cache.checkpoint
    assert checkpoint is not None
    await c.scheduler.drain()
    entered, gate = threading.Event(), threading.Event()
    write = checkpoint.write_if_dir_exists

    def held_write(entries: Sequence[EpochEntry]) -> bool:
        entered.set()
        gate.wait(10)
        return write(entries)

    monkeypatch.setattr(checkpoint, "write_if_dir_exists", held_write)
    on_disk_at_return: list[list[EpochEntry]] = []
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        rebuild = asyncio.create_task(
            build_remote_log_aux_state(
                c.endpoint(2), reader, TP, follower.state.leader_epoch, follower, executor
            )
        )
        rebuild.add_done_callback(lambda _: on_disk_at_return.append(checkpoint.read()))
        try:
            assert await asyncio.to_thread(entered.wait, 10)
            # Long enough for a rebuild that does not wait for the write to return.
            await asyncio.wait({rebuild}, timeout=0.5)
        finally:
            gate.set()
        assert await asyncio.wait_for(rebuild, 10) == LOCAL_START
    rebuilt = [EpochEntry(0, 0), EpochEntry(2, 15)]
    assert list(follower.log.leader_epoch_cache.entries) == rebuilt
    assert on_disk_at_return == [rebuilt]
