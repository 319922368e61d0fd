"""RemoteIndexCache (Kafka's): remote indexes fetched once, kept on disk under Kafka's
file names, bounded by total size with LRU eviction, reloaded at start with corrupt or
partial leftovers discarded, and forgotten when their segment is deleted."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator
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
)
from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.storage.scheduler import Scheduler
from tiercel.tiered.remote_index_cache import DIR_NAME, RemoteIndexCache
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import (
    IndexType,
    RemoteLogSegmentMetadata,
)

__all__ = ["scheduler"]


class CountingRsm(LocalTieredStorage):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.index_fetches = 0

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        self.index_fetches += 1
        return super().fetch_index(metadata, index_type)


@pytest.fixture
async def remote(
    tmp_path: Path, scheduler: Scheduler
) -> AsyncIterator[tuple[CountingRsm, list[RemoteLogSegmentMetadata]]]:
    log = open_log(str(tmp_path / "orders-0"), small_config(), scheduler)
    for i in range(40):
        produce(log, [b"x" * (30 + i * 7 % 90)] * 2, BASE_TS + i, 0)
    rsm = CountingRsm(str(tmp_path / "remote"))
    segments = await tier_rolled_segments(log, rsm, InMemoryRemoteLogMetadataManager())
    assert len(segments) >= 4
    yield rsm, segments
    await log.close()


def entry_size(rsm: LocalTieredStorage, metadata: RemoteLogSegmentMetadata) -> int:
    return len(rsm.fetch_index(metadata, IndexType.OFFSET)) + len(
        rsm.fetch_index(metadata, IndexType.TIMESTAMP)
    )


def test_indexes_are_fetched_once_and_stored_under_kafkas_names(
    tmp_path: Path, remote: tuple[CountingRsm, list[RemoteLogSegmentMetadata]]
) -> None:
    rsm, segments = remote
    cache = RemoteIndexCache(rsm, str(tmp_path / "log-dir"))
    first = segments[1]
    position = cache.lookup_offset(first, first.start_offset + 3)
    fetches = rsm.index_fetches
    assert cache.lookup_offset(first, first.start_offset + 3) == position
    assert rsm.index_fetches == fetches  # the second lookup is served from the cache
    prefix = f"{first.start_offset}_{uuid_to_kafka_str(first.remote_log_segment_id.id)}"
    assert sorted(os.listdir(tmp_path / "log-dir" / DIR_NAME)) == [
        f"{prefix}.index",
        f"{prefix}.timeindex",
        f"{prefix}.txnindex",  # empty: no aborted transactions, as Kafka keeps it
    ]


def test_the_least_recently_used_entry_goes_past_the_size_bound(
    tmp_path: Path, remote: tuple[CountingRsm, list[RemoteLogSegmentMetadata]]
) -> None:
    rsm, segments = remote
    a, b, c = segments[:3]
    bound = entry_size(rsm, a) + entry_size(rsm, b) + entry_size(rsm, c) - 1
    cache = RemoteIndexCache(rsm, str(tmp_path / "log-dir"), max_size_bytes=bound)
    cache.get_index_entry(a)
    cache.get_index_entry(b)
    cache.get_index_entry(a)  # a is now more recent than b
    cache.get_index_entry(c)
    ids = {m.remote_log_segment_id.id for m in (a, b, c)}
    assert {i for i in ids if i in cache} == {
        a.remote_log_segment_id.id,
        c.remote_log_segment_id.id,
    }
    assert cache.size_in_bytes <= bound
    names = os.listdir(tmp_path / "log-dir" / DIR_NAME)
    assert not [n for n in names if uuid_to_kafka_str(b.remote_log_segment_id.id) in n]


def test_a_restart_reloads_whole_entries_and_discards_the_rest(
    tmp_path: Path, remote: tuple[CountingRsm, list[RemoteLogSegmentMetadata]]
) -> None:
    rsm, segments = remote
    a, b, c = segments[:3]
    cache = RemoteIndexCache(rsm, str(tmp_path / "log-dir"))
    for metadata in (a, b, c):
        cache.get_index_entry(metadata)
    cache.close()
    cache_dir = tmp_path / "log-dir" / DIR_NAME
    b_prefix = f"{b.start_offset}_{uuid_to_kafka_str(b.remote_log_segment_id.id)}"
    c_prefix = f"{c.start_offset}_{uuid_to_kafka_str(c.remote_log_segment_id.id)}"
    # b's offset index torn mid-entry, c's time index lost, and a write that never finished.
    with open(cache_dir / f"{b_prefix}.index", "ab") as file:
        file.write(b"\x00\x01\x02")
    os.remove(cache_dir / f"{c_prefix}.timeindex")
    (cache_dir / f"{c_prefix}.index.1234.tmp").write_bytes(b"partial")

    fetches = rsm.index_fetches
    reloaded = RemoteIndexCache(rsm, str(tmp_path / "log-dir"))
    assert a.remote_log_segment_id.id in reloaded
    assert b.remote_log_segment_id.id not in reloaded
    assert c.remote_log_segment_id.id not in reloaded
    assert sorted(os.listdir(cache_dir)) == sorted(
        f"{a.start_offset}_{uuid_to_kafka_str(a.remote_log_segment_id.id)}.{suffix}"
        for suffix in ("index", "timeindex", "txnindex")
    )
    assert reloaded.lookup_offset(a, a.end_offset) == cache.lookup_offset(a, a.end_offset)
    assert rsm.index_fetches == fetches
    # b is fetched again, whole
    assert reloaded.lookup_offset(b, b.end_offset) == cache.lookup_offset(b, b.end_offset)


def test_removing_a_deleted_segment_drops_its_files(
    tmp_path: Path, remote: tuple[CountingRsm, list[RemoteLogSegmentMetadata]]
) -> None:
    rsm, segments = remote
    cache = RemoteIndexCache(rsm, str(tmp_path / "log-dir"))
    cache.get_index_entry(segments[0])
    cache.remove(segments[0].remote_log_segment_id.id)
    assert len(cache) == 0
    assert cache.size_in_bytes == 0
    cache.close()  # the cleaner thread has removed what was queued
    assert os.listdir(tmp_path / "log-dir" / DIR_NAME) == []


async def test_remove_on_the_event_loop_leaves_the_files_to_the_cleaner_thread(
    tmp_path: Path,
    remote: tuple[CountingRsm, list[RemoteLogSegmentMetadata]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The RemoteLogManager tells the cache of every deleted segment from the event loop:
    the entry leaves the LRU accounting at once, but its files are unlinked by the
    cache's cleaner thread (Kafka's remote-log-index-cleaner), never on the loop."""
    rsm, segments = remote
    cache = RemoteIndexCache(rsm, str(tmp_path / "log-dir"))
    for metadata in segments[:3]:
        cache.get_index_entry(metadata)
    kept = cache.size_in_bytes - entry_size(rsm, segments[0]) - entry_size(rsm, segments[1])
    unlinked_on: list[int] = []
    remove = os.remove

    def recording_remove(path: str) -> None:
        unlinked_on.append(threading.get_ident())
        remove(path)

    monkeypatch.setattr(os, "remove", recording_remove)
    loop_thread = threading.get_ident()
    for metadata in segments[:2]:
        cache.remove(metadata.remote_log_segment_id.id)
    assert (len(cache), cache.size_in_bytes) == (1, kept)
    await asyncio.to_thread(cache.close)
    assert unlinked_on and loop_thread not in unlinked_on
    third = uuid_to_kafka_str(segments[2].remote_log_segment_id.id)
    assert all(third in name for name in os.listdir(tmp_path / "log-dir" / DIR_NAME))
