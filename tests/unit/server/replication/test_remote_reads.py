"""The read side of KIP-405 in the ReplicaManager, with real logs, a LocalTieredStorage
and the in-memory RLMM: a consumer fetch below the local log start is served from the
remote tier (Kafka's readFromLog → DelayedRemoteFetch), a follower's is
OFFSET_MOVED_TO_TIERED_STORAGE, the reader pool's pending bound and
remote.fetch.max.wait.ms hold, and ListOffsets answers -4/-5/-6 per version."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from replication_support import TP, Broker, batch, values

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from support.tiering import drop_local_segments_below, tier_rolled_segments
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.list_offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    IsolationLevel,
)
from tiercel.server.delayed_fetch import FetchRequestPartition, FetchResult
from tiercel.storage.log_values import FetchIsolation, TimestampAndOffset
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.remote_index_cache import RemoteIndexCache
from tiercel.tiered.remote_log_reader import RemoteLogReader
from tiercel.tiered.remote_storage_thread_pool import RemoteStorageThreadPool
from tiercel.tiered.rlm_quota import RLMQuota
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import RemoteLogSegmentMetadata

BASE_TS = 1_700_000_000_000


class GatedStorage(LocalTieredStorage):
    """A LocalTieredStorage whose segment reads wait for ``gate`` (a slow object store)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.gate = threading.Event()
        self.gate.set()
        self.segments_fetched: list[int] = []  # start offsets, as the fetches began

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> bytes:
        self.segments_fetched.append(metadata.start_offset)
        self.gate.wait(10)
        return super().fetch_log_segment(metadata, start_position, end_position)


@dataclass
class Tiered:
    broker: Broker
    log: UnifiedLog
    rsm: GatedStorage
    reader: RemoteLogReader
    local_reads: dict[int, bytes]
    segments: list[RemoteLogSegmentMetadata]

    async def consumer_fetch(self, offset: int, max_wait_ms: int = 0) -> FetchResult:
        request = FetchRequestPartition(TP, offset, 1 << 20, 0)
        (result,) = await self.broker.rm.fetch_messages(
            [request], max_wait_ms, 1, 1 << 20, FetchIsolation.HIGH_WATERMARK
        )
        return result


@pytest.fixture
async def tiered(broker: Broker, tmp_path: Path) -> AsyncIterator[Tiered]:
    """Broker 1 leads TP (alone in its ISR): 12 batches of 5 records over 6 segments,
    the first 4 segments (offsets 0-39) copied to the remote tier and gone from local
    disk; what a local read of each offset gave before is in ``local_reads``."""
    await broker.apply(1, 0, (1,), (1,))
    log = broker.rm.partitions[TP].log
    for i in range(12):
        timestamps = BASE_TS + 10 * i
        await broker.rm.append_records(5000, 1, {TP: batch(values(5, f"b{i}-"), timestamps)})
        if i % 2 == 1:
            log.roll()
    local_reads = {
        offset: log.read(offset, 1 << 20, FetchIsolation.HIGH_WATERMARK, True).records
        for offset in range(40)
    }
    rsm = GatedStorage(str(tmp_path / "remote"))
    rlmm = InMemoryRemoteLogMetadataManager()
    segments = await tier_rolled_segments(log, rsm, rlmm, up_to=40)
    assert [s.end_offset for s in segments] == [9, 19, 29, 39]
    drop_local_segments_below(log, 40)
    pool = RemoteStorageThreadPool("remote-reader-test", threads=1, max_pending_tasks=1)
    reader = RemoteLogReader(rsm, rlmm, RemoteIndexCache(rsm, str(tmp_path / "logs")), pool)
    broker.rm.remote_log_manager = reader
    yield Tiered(broker, log, rsm, reader, local_reads, segments)
    rsm.gate.set()
    pool.shutdown()


async def test_a_consumer_below_the_local_start_reads_the_remote_tier(tiered: Tiered) -> None:
    assert (tiered.log.log_start_offset, tiered.log.local_log_start_offset) == (0, 40)
    for offset in (0, 3, 9, 10, 27, 39):
        result = await tiered.consumer_fetch(offset)
        assert result.error is None
        assert result.read is not None
        assert bytes(result.read.info.records) == tiered.local_reads[offset], offset
        assert result.read.log_start_offset == 0
    local = await tiered.consumer_fetch(40)
    assert local.read is not None and local.read.info.records


async def test_remote_reads_do_not_wait_for_min_bytes_elsewhere(tiered: Tiered) -> None:
    """Kafka: a fetch needing the remote tier always waits for it, even with
    max_wait_ms 0."""
    result = await tiered.consumer_fetch(12, max_wait_ms=0)
    assert result.read is not None and bytes(result.read.info.records) == tiered.local_reads[12]


async def test_a_follower_below_the_local_start_is_told_offset_moved_to_tiered_storage(
    tiered: Tiered,
) -> None:
    await tiered.broker.apply(1, 0, (1, 2), (1, 2))
    result = await tiered.broker.follower_fetch(2, 5)
    assert result.error is not None
    assert result.error.error_code == ErrorCode.offset_moved_to_tiered_storage


async def test_below_the_log_start_is_still_out_of_range(tiered: Tiered) -> None:
    tiered.log.log_start_offset = 10  # as DeleteRecords or remote retention would move it
    result = await tiered.consumer_fetch(5)
    assert result.error is not None
    assert result.error.error_code == ErrorCode.offset_out_of_range


async def test_a_full_reader_pool_answers_an_error_at_once(tiered: Tiered) -> None:
    pool = tiered.reader.pool
    for _ in range(pool.threads + pool.max_pending_tasks):
        pool.try_reserve()
    rejected = await tiered.consumer_fetch(0)
    assert rejected.error is not None
    assert rejected.error.error_code == ErrorCode.unknown_server_error
    for _ in range(pool.threads + pool.max_pending_tasks):
        pool.release()
    served = await tiered.consumer_fetch(0)
    assert served.error is None and served.read is not None and served.read.info.records


async def test_a_late_remote_read_answers_no_records_after_remote_fetch_max_wait(
    tiered: Tiered,
) -> None:
    tiered.broker.rm.remote_fetch_max_wait_ms = 50
    tiered.reader.index_cache.get_index_entry(tiered.segments[0])  # only the data is slow
    tiered.rsm.gate.clear()
    late = await tiered.consumer_fetch(0)
    assert late.error is None and late.read is not None
    assert bytes(late.read.info.records) == b""
    assert tiered.reader.pool.in_flight == 1  # still reading, still counted
    tiered.rsm.gate.set()
    tiered.broker.rm.remote_fetch_max_wait_ms = 10_000  # behind the late read, one thread
    served = await tiered.consumer_fetch(0)
    assert served.read is not None and bytes(served.read.info.records) == tiered.local_reads[0]


async def test_a_late_remote_read_not_yet_started_gives_its_place_in_the_pool_back(
    tiered: Tiered,
) -> None:
    """Kafka's DelayedRemoteFetch.onExpiration cancels the read: one queued behind the
    pool's only thread never runs and leaves the bound at once, so a consumer retrying
    late fetches does not fill the pool; the running one keeps its place until its call
    returns."""
    tiered.broker.rm.remote_fetch_max_wait_ms = 50
    for segment in tiered.segments[:2]:
        tiered.reader.index_cache.get_index_entry(segment)  # only the data is slow
    tiered.rsm.gate.clear()
    running = await tiered.consumer_fetch(0)
    queued = await tiered.consumer_fetch(10)
    for late in (running, queued):
        assert late.error is None and late.read is not None
        assert bytes(late.read.info.records) == b""
    pool = tiered.reader.pool
    await asyncio.sleep(0.05)  # the cancelled reads end
    assert pool.in_flight == 1, "the running call's place only"
    tiered.broker.rm.remote_fetch_max_wait_ms = 10_000
    again = asyncio.create_task(tiered.consumer_fetch(10))  # admitted: room for it
    await asyncio.sleep(0.05)
    assert pool.in_flight == 2
    tiered.rsm.gate.set()
    served = await again
    assert served.read is not None and bytes(served.read.info.records) == tiered.local_reads[10]
    assert tiered.rsm.segments_fetched == [0, 10], "the queued read never fetched"
    for _ in range(100):
        if pool.in_flight == 0:
            break
        await asyncio.sleep(0.01)
    assert pool.in_flight == 0


async def list_offset(tiered: Tiered, timestamp: int, version: int) -> tuple[int, int, int]:
    result = await tiered.broker.rm.fetch_offset_for_timestamp(
        TP, timestamp, IsolationLevel.READ_UNCOMMITTED, None, True, version
    )
    if result.error is not None:
        return result.error.error_code, -1, -1
    found = result.found
    assert found is not None
    return 0, found.offset, -1 if found.leader_epoch is None else found.leader_epoch


@pytest.mark.parametrize(
    ("timestamp", "first_version", "expected"),
    [
        (EARLIEST_TIMESTAMP, 1, (0, 0)),
        (EARLIEST_LOCAL_TIMESTAMP, 8, (40, 0)),
        (LATEST_TIERED_TIMESTAMP, 9, (39, 0)),
        (EARLIEST_PENDING_UPLOAD_TIMESTAMP, 11, (40, 0)),
    ],
)
async def test_list_offsets_special_timestamps_per_version(
    tiered: Tiered, timestamp: int, first_version: int, expected: tuple[int, int]
) -> None:
    if first_version > 1:
        unsupported = await list_offset(tiered, timestamp, first_version - 1)
        assert unsupported[0] == ErrorCode.unsupported_version
    assert await list_offset(tiered, timestamp, first_version) == (0, *expected)
    assert await list_offset(tiered, timestamp, 11) == (0, *expected)


async def test_list_offsets_without_tiering(tiered: Tiered) -> None:
    """Kafka: LATEST_TIERED and EARLIEST_PENDING_UPLOAD answer -1 (epoch -1) when the
    topic does not tier; nothing remote yet means the log start is pending."""
    tiered.log.set_remote_log_enabled(False)
    assert await list_offset(tiered, LATEST_TIERED_TIMESTAMP, 11) == (0, -1, -1)
    assert await list_offset(tiered, EARLIEST_PENDING_UPLOAD_TIMESTAMP, 11) == (0, -1, -1)
    tiered.log.set_remote_log_enabled(True)
    # A new leader whose RemoteLogManager has not yet learnt what was copied.
    tiered.log._highest_offset_in_remote_storage = -1
    # Local start above the log start with nothing known remote: a leader not told yet.
    assert await list_offset(tiered, EARLIEST_PENDING_UPLOAD_TIMESTAMP, 11) == (0, -1, -1)
    assert await list_offset(tiered, LATEST_TIERED_TIMESTAMP, 11) == (0, -1, -1)


async def test_timestamp_lookups_search_the_remote_tier_first(tiered: Tiered) -> None:
    for i in (0, 1, 3, 7, 9, 11):
        result = await tiered.broker.rm.fetch_offset_for_timestamp(
            TP, BASE_TS + 10 * i, IsolationLevel.READ_UNCOMMITTED, None, True, 9
        )
        assert result.found == TimestampAndOffset(BASE_TS + 10 * i, 5 * i, 0), i


async def test_a_full_reader_pool_fails_a_remote_timestamp_lookup(tiered: Tiered) -> None:
    pool = tiered.reader.pool
    for _ in range(pool.threads + pool.max_pending_tasks):
        pool.try_reserve()
    result = await tiered.broker.rm.fetch_offset_for_timestamp(
        TP, BASE_TS, IsolationLevel.READ_UNCOMMITTED, None, True, 9
    )
    assert result.error is not None
    assert result.error.error_code == ErrorCode.unknown_server_error


async def test_a_slow_remote_timestamp_lookup_times_out(tiered: Tiered) -> None:
    """Kafka's DelayedRemoteListOffsets: past the request's timeout (v10+) the
    partition answers REQUEST_TIMED_OUT."""
    tiered.rsm.gate.clear()
    result = await tiered.broker.rm.fetch_offset_for_timestamp(
        TP, BASE_TS + 10, IsolationLevel.READ_UNCOMMITTED, None, True, 10, 50
    )
    assert result.error is not None
    assert result.error.error_code == ErrorCode.request_timed_out
    tiered.rsm.gate.set()


async def test_a_remote_fetch_stops_waiting_when_the_leadership_moves(tiered: Tiered) -> None:
    """Kafka's DelayedRemoteFetch.tryComplete: a partition no longer led here completes
    the wait at once; the fetch answers no records and the client learns of the new
    leader on its next fetch."""
    tiered.broker.rm.remote_fetch_max_wait_ms = 30_000
    tiered.reader.index_cache.get_index_entry(tiered.segments[0])
    tiered.rsm.gate.clear()
    loop = asyncio.get_running_loop()
    started = loop.time()
    fetch = asyncio.create_task(tiered.consumer_fetch(0))
    await asyncio.sleep(0.05)
    assert not fetch.done()
    await tiered.broker.apply(2, 1, (1, 2), (1, 2))  # broker 2 leads now
    result = await asyncio.wait_for(fetch, 5)
    assert loop.time() - started < 5
    assert result.error is None and result.read is not None
    assert bytes(result.read.info.records) == b""
    tiered.rsm.gate.set()


async def test_the_fetch_quota_holds_remote_reads_back_once_spent(tiered: Tiered) -> None:
    """remote.log.manager.fetch.max.bytes.per.second: a read that spends the bucket is
    served; until it refills, a remote fetch answers no records (Kafka's
    isRemoteLogFetchQuotaExceeded), after a wait rather than at once."""
    tiered.reader.fetch_quota = RLMQuota(100)  # bytes per second: one batch spends it
    first = await tiered.consumer_fetch(0)
    assert first.read is not None and bytes(first.read.info.records) == tiered.local_reads[0]
    started = asyncio.get_running_loop().time()
    held = await tiered.consumer_fetch(0)
    assert held.error is None and held.read is not None and not held.read.info.records
    assert asyncio.get_running_loop().time() - started >= 0.1
    # Local reads are never held back.
    local = await tiered.consumer_fetch(40)
    assert local.read is not None and local.read.info.records
