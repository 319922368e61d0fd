"""Remote reads and timestamp lookups (Kafka's RemoteLogManager.read and
findOffsetByTimestamp) over a real UnifiedLog copied into a LocalTieredStorage: every
answer equals what the same log gives when read locally."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from support.tiering import (
    BASE_TS,
    open_log,
    produce,
    scheduler,
    small_config,
    tier_rolled_segments,
    topic_id_partition,
)
from tiercel.protocol.errors import OffsetOutOfRangeError, ReplicaNotAvailableError
from tiercel.protocol.record_batch import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    iter_batches,
    read_header,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.leader_epoch_cache import LeaderEpochFileCache
from tiercel.storage.log_values import FetchIsolation
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.remote_index_cache import RemoteIndexCache
from tiercel.tiered.remote_log_reader import RemoteLogReader, RemoteStorageFetchInfo
from tiercel.tiered.remote_storage_thread_pool import (
    RejectedExecutionError,
    RemoteStorageThreadPool,
)
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import RemoteLogSegmentMetadata

__all__ = ["scheduler"]


@dataclass
class Tiered:
    log: UnifiedLog
    reader: RemoteLogReader
    segments: list[RemoteLogSegmentMetadata]

    def fetch_info(self, offset: int, max_bytes: int, min_one: bool) -> RemoteStorageFetchInfo:
        return RemoteStorageFetchInfo(max_bytes, min_one, topic_id_partition(self.log), offset)


@pytest.fixture
def pool() -> Iterator[RemoteStorageThreadPool]:
    p = RemoteStorageThreadPool("remote-reader-test", threads=2, max_pending_tasks=3)
    yield p
    p.shutdown()


def reader_over(
    tmp_path: Path, pool: RemoteStorageThreadPool
) -> tuple[LocalTieredStorage, InMemoryRemoteLogMetadataManager, RemoteLogReader]:
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    rlmm = InMemoryRemoteLogMetadataManager()
    cache = RemoteIndexCache(rsm, str(tmp_path / "cache-dir"))
    return rsm, rlmm, RemoteLogReader(rsm, rlmm, cache, pool)


@pytest.fixture
async def tiered(
    tmp_path: Path, scheduler: Scheduler, pool: RemoteStorageThreadPool
) -> AsyncIterator[Tiered]:
    """A log of batches of 1 to 4 records and varied sizes over many 1 KiB segments,
    written by leaders of epochs 0, 1 (starting inside a segment) and 3; timestamps grow
    by 10 ms a batch. Everything but the active segment is remote."""
    log = open_log(str(tmp_path / "orders-0"), small_config(), scheduler)
    for i in range(90):
        epoch = 0 if i < 25 else 1 if i < 60 else 3
        values = [bytes([65 + i % 26]) * (20 + (i * 37) % 170) for _ in range(1 + i % 4)]
        produce(log, values, BASE_TS + 10 * i, epoch)
    rsm, rlmm, reader = reader_over(tmp_path, pool)
    segments = await tier_rolled_segments(log, rsm, rlmm)
    assert len(segments) >= 8
    yield Tiered(log, reader, segments)
    await log.close()


@pytest.mark.parametrize(
    ("max_bytes", "min_one"), [(1, True), (1, False), (150, True), (700, False), (5000, True)]
)
async def test_every_remote_offset_reads_as_the_local_log_does(
    tiered: Tiered, max_bytes: int, min_one: bool
) -> None:
    last = tiered.segments[-1].end_offset
    for offset in range(last + 1):
        local = tiered.log.read(offset, max_bytes, FetchIsolation.LOG_END, min_one)
        remote = await tiered.reader.read(
            tiered.fetch_info(offset, max_bytes, min_one), tiered.log.leader_epoch_cache
        )
        assert remote.records == local.records, offset
        assert remote.fetch_offset_metadata == local.fetch_offset_metadata, offset


async def test_a_first_batch_larger_than_max_bytes_comes_whole_or_not_at_all(
    tiered: Tiered,
) -> None:
    """With min_one_message the whole batch (KIP-74); without it no records, never a
    fragment of the batch (Kafka's RemoteLogManager.read): a client cannot use one."""
    segment = tiered.segments[0]
    remote = await tiered.reader.read(
        tiered.fetch_info(segment.start_offset, 10, True), tiered.log.leader_epoch_cache
    )
    (first,) = [header for _, header in iter_batches(remote.records)]
    assert len(remote.records) == first.size_in_bytes > 10
    for max_bytes in (10, first.size_in_bytes - 1):
        without = await tiered.reader.read(
            tiered.fetch_info(segment.start_offset, max_bytes, False),
            tiered.log.leader_epoch_cache,
        )
        assert without.records == b"", max_bytes
        assert without.fetch_offset_metadata.message_offset == segment.start_offset
    fits = await tiered.reader.read(
        tiered.fetch_info(segment.start_offset, first.size_in_bytes, False),
        tiered.log.leader_epoch_cache,
    )
    assert fits.records == remote.records


async def test_epochs_change_inside_a_segment(tiered: Tiered) -> None:
    spanning = [s for s in tiered.segments if len(s.segment_leader_epochs) > 1]
    assert spanning, "the fixture must start an epoch inside a segment"
    segment = spanning[0]
    for offset in (segment.start_offset, segment.end_offset):
        local = tiered.log.read(offset, 1000, FetchIsolation.LOG_END, True)
        remote = await tiered.reader.read(
            tiered.fetch_info(offset, 1000, True), tiered.log.leader_epoch_cache
        )
        assert remote.records == local.records


async def test_an_offset_no_remote_segment_holds_is_out_of_range(tiered: Tiered) -> None:
    beyond = tiered.segments[-1].end_offset + 1
    with pytest.raises(OffsetOutOfRangeError):
        await tiered.reader.read(
            tiered.fetch_info(beyond, 100, True), tiered.log.leader_epoch_cache
        )


async def test_reads_before_the_metadata_is_read_back_are_retriable_not_out_of_range(
    tiered: Tiered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart the metadata manager's view starts empty: Kafka's
    RemotePartitionMetadataStore answers REPLICA_NOT_AVAILABLE until it is read back."""
    log = tiered.log
    monkeypatch.setattr(tiered.reader.rlmm, "is_ready", lambda partition: False)
    with pytest.raises(ReplicaNotAvailableError):
        await tiered.reader.read(tiered.fetch_info(0, 100, True), log.leader_epoch_cache)
    with pytest.raises(ReplicaNotAvailableError):
        await tiered.reader.find_offset_by_timestamp(
            topic_id_partition(log), BASE_TS, 0, log.leader_epoch_cache, log.log_end_offset
        )


async def test_an_offset_past_the_segments_batches_continues_in_the_next_segment(
    tmp_path: Path, scheduler: Scheduler, pool: RemoteStorageThreadPool
) -> None:
    """Offset 10 was compacted away: the first remote segment covers [0, 10] but has no
    batch reaching 10, so the read goes on to the next one (findNextSegmentMetadata),
    as a local read goes on to the next local segment."""
    log = open_log(str(tmp_path / "compacted-0"), small_config(), scheduler)
    log.append_as_follower(
        build_record_batch(
            [SimpleRecord(b"k", b"v" * 50, timestamp=BASE_TS)] * 10, partition_leader_epoch=0
        )
    )
    log.roll(11)
    for base in (11, 14):
        log.append_as_follower(
            build_record_batch(
                [SimpleRecord(b"k", b"w" * 50, timestamp=BASE_TS)] * 3,
                base_offset=base,
                partition_leader_epoch=0,
            )
        )
        log.roll(base + 3)
    rsm, rlmm, reader = reader_over(tmp_path, pool)
    segments = await tier_rolled_segments(log, rsm, rlmm)
    assert segments[0].end_offset == 10
    tip = topic_id_partition(log)
    local = log.read(10, 1000, FetchIsolation.LOG_END, True)
    remote = await reader.read(RemoteStorageFetchInfo(1000, True, tip, 10), log.leader_epoch_cache)
    assert remote.records == local.records
    assert remote.fetch_offset_metadata.segment_base_offset == 11
    await log.close()


async def test_timestamp_lookups_answer_as_the_local_log(tiered: Tiered) -> None:
    log = tiered.log
    tip = topic_id_partition(log)
    last_remote_ts = max(s.max_timestamp_ms for s in tiered.segments)
    for target in [BASE_TS - 5, BASE_TS, BASE_TS + 1, *range(BASE_TS + 95, last_remote_ts + 1, 70)]:
        local = await log.fetch_offset_by_timestamp(target)
        remote = await tiered.reader.find_offset_by_timestamp(
            tip, target, log.log_start_offset, log.leader_epoch_cache, log.log_end_offset
        )
        assert remote == local, target
    beyond = await tiered.reader.find_offset_by_timestamp(
        tip, last_remote_ts + 1, 0, log.leader_epoch_cache, log.log_end_offset
    )
    assert beyond is None


async def test_reads_beyond_the_pending_bound_are_rejected(tiered: Tiered) -> None:
    pool = tiered.reader.pool
    started = [
        tiered.reader.async_read(tiered.fetch_info(0, 100, True), tiered.log.leader_epoch_cache)
        for _ in range(pool.threads + pool.max_pending_tasks)
    ]
    with pytest.raises(RejectedExecutionError):
        tiered.reader.async_read(tiered.fetch_info(0, 100, True), tiered.log.leader_epoch_cache)
    await asyncio.gather(*started)
    assert pool.in_flight == 0
    done = tiered.reader.async_read(tiered.fetch_info(0, 100, True), tiered.log.leader_epoch_cache)
    assert (await done).records


async def test_only_the_needed_byte_range_is_fetched(tiered: Tiered) -> None:
    """A read deep in a segment fetches from the index entry before the offset, not the
    segment's start."""
    fetched: list[tuple[int, int | None]] = []
    rsm = tiered.reader.rsm
    original = rsm.fetch_log_segment

    def spy(metadata: RemoteLogSegmentMetadata, start: int, end: int | None) -> bytes:
        fetched.append((start, end))
        return original(metadata, start, end)

    tiered.reader.rsm = spy_rsm = type("Spy", (), {})()
    spy_rsm.fetch_log_segment = spy  # type: ignore[attr-defined]
    segment = tiered.segments[2]
    await tiered.reader.read(
        tiered.fetch_info(segment.end_offset, 64, False), tiered.log.leader_epoch_cache
    )
    assert fetched and fetched[0][0] > 0
    assert all(end is not None and end < segment.segment_size_in_bytes for _, end in fetched)
    assert os.path.isdir(tiered.reader.index_cache.cache_dir)


async def test_create_builds_the_pool_and_index_cache_from_the_broker_settings(
    tmp_path: Path,
) -> None:
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    reader = RemoteLogReader.create(
        rsm, InMemoryRemoteLogMetadataManager(), str(tmp_path / "log-dir"), 3, 7, 4096
    )
    try:
        assert (reader.pool.threads, reader.pool.max_pending_tasks) == (3, 7)
        assert reader.index_cache.max_size_bytes == 4096
        assert os.path.isdir(tmp_path / "log-dir" / "remote-log-index-cache")
    finally:
        reader.close()


async def test_a_consumer_reads_the_whole_remote_range_across_segments(tiered: Tiered) -> None:
    """Fetch after fetch from offset 0, each from the offset after the last whole batch
    received: every remote segment's bytes, in order, nothing twice."""
    end = tiered.segments[-1].end_offset + 1
    received = bytearray()
    offset = 0
    while offset < end:
        info = await tiered.reader.read(
            tiered.fetch_info(offset, 700, True), tiered.log.leader_epoch_cache
        )
        position = 0
        data = info.records
        while position + RECORD_BATCH_OVERHEAD <= len(data):
            header = read_header(data, position)
            size = header.batch_length + LOG_OVERHEAD
            if position + size > len(data):
                break
            received += data[position : position + size]
            offset = header.last_offset + 1
            position += size
    local = b"".join(os.pread(s.fd, s.size, 0) for s in tiered.log.segments[:-1])
    assert bytes(received) == local


async def test_a_read_stops_where_the_segment_leaves_the_readers_lineage(
    tmp_path: Path, scheduler: Scheduler, pool: RemoteStorageThreadPool
) -> None:
    """KIP-405 scenarios 3 to 5: a remote segment of an old leader holds epoch 0 up to
    offset 3, but on the reading log's lineage epoch 1 starts at 2 (another leader's
    records are at 2 and 3). A read from 0 returns offsets 0 and 1 only; the next read,
    at 2, is epoch 1's and finds no remote segment of it."""
    log = open_log(str(tmp_path / "old-leader-0"), small_config(), scheduler)
    for n in range(4):
        produce(log, [b"msg %d" % n], BASE_TS, epoch=0)
    log.roll()
    rsm, rlmm, reader = reader_over(tmp_path, pool)
    await tier_rolled_segments(log, rsm, rlmm)
    lineage = LeaderEpochFileCache(log.topic_partition, None)
    lineage.assign(0, 0)
    lineage.assign(1, 2)
    info = RemoteStorageFetchInfo(1 << 20, True, topic_id_partition(log), 0)
    read = await reader.read(info, lineage)
    assert [h.base_offset for _, h in iter_batches(read.records)] == [0, 1]
    with pytest.raises(OffsetOutOfRangeError):
        await reader.read(
            RemoteStorageFetchInfo(1 << 20, True, info.topic_id_partition, 2), lineage
        )
    # Timestamp lookups (ListOffsets) see the same records: from 1 on, none of them.
    tip = info.topic_id_partition
    for start, offset in ((0, 0), (1, 1), (2, None)):
        found = await reader.find_offset_by_timestamp(tip, BASE_TS, start, lineage, 4)
        assert (found and found.offset) == offset
    await log.close()
