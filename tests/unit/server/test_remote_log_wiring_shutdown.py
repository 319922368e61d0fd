"""The broker's remote tier closes in Kafka's order (RemoteLogManager.close): the tasks
and their pools, then the reader pool with the reads in flight, and only then the index
cache, the metadata manager and the storage manager. A remote read running at shutdown
must never find the storage manager closed under it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

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
from tiercel.config.broker_config import BrokerConfig
from tiercel.config.remote_log_manager_config import RemoteLogManagerConfig
from tiercel.server.remote_log_wiring import RemoteLogWiring
from tiercel.storage.scheduler import Scheduler
from tiercel.tiered.remote_index_cache import RemoteIndexCache
from tiercel.tiered.remote_log_manager import RemoteLogManager
from tiercel.tiered.remote_log_reader import RemoteLogReader, RemoteStorageFetchInfo
from tiercel.tiered.remote_storage_thread_pool import RemoteStorageThreadPool
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteStorageError,
)

__all__ = ["scheduler"]


class ClosableStorage(LocalTieredStorage):
    """A local tier that refuses calls once closed (an S3 client does: its connection
    pool is gone), and whose segment reads wait for ``release``."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.closed = False
        self.reading = threading.Event()
        self.release = threading.Event()

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> bytes:
        self.reading.set()
        assert self.release.wait(10)
        if self.closed:
            raise RemoteStorageError("the storage manager is closed")
        return super().fetch_log_segment(metadata, start_position, end_position)

    def close(self) -> None:
        self.closed = True


async def test_a_remote_read_in_flight_at_shutdown_finishes_before_the_storage_closes(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(str(tmp_path / "orders-0"), small_config(), scheduler)
    for i in range(30):
        produce(log, [b"v" * 200], BASE_TS + i, 0)
    rsm = ClosableStorage(str(tmp_path / "remote"))
    rsm.release.set()  # uploads and index fetches go through
    rlmm = InMemoryRemoteLogMetadataManager()
    segments = await tier_rolled_segments(log, rsm, rlmm)
    config = RemoteLogManagerConfig.from_broker(
        BrokerConfig({"remote.log.storage.system.enable": "true"})
    )
    rlm = RemoteLogManager(config, 1, rsm, rlmm)
    pool = RemoteStorageThreadPool("remote-reader-test", threads=2, max_pending_tasks=2)
    reader = RemoteLogReader(rsm, rlmm, RemoteIndexCache(rsm, str(tmp_path / "cache")), pool)
    replica_manager: Any = SimpleNamespace(leadership_listeners=[], remote_log_manager=reader)
    wiring = RemoteLogWiring(rlm, reader, replica_manager, metadata_cache=None)  # type: ignore[arg-type]
    # The index is cached first, so that the read blocks on the segment itself.
    reader.index_cache.get_index_entry(segments[1])
    rsm.release.clear()
    fetch = RemoteStorageFetchInfo(1024, True, topic_id_partition(log), segments[1].start_offset)
    read = reader.async_read(fetch, log.leader_epoch_cache)
    assert await asyncio.to_thread(rsm.reading.wait, 10)
    closing = asyncio.create_task(wiring.close())
    await asyncio.sleep(0.3)  # the shutdown has had every chance to close the storage
    assert not rsm.closed
    rsm.release.set()
    info = await asyncio.wait_for(read, 10)
    assert info.records and info.fetch_offset_metadata.message_offset == segments[1].start_offset
    await asyncio.wait_for(closing, 15)
    assert rsm.closed
    assert replica_manager.remote_log_manager is None
    await log.close()
