"""The remote tier KIP-405's follower and unclean-election scenarios share: one
LocalTieredStorage and one in-memory metadata manager (standing for
``__remote_log_metadata``) seen by every in-process broker, each broker's RemoteLogManager
tasks (copy, expiration, follower) run round by round, and a consumer that reads a
leader's log from its start, through the remote reader below the local start and the
local log above it."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

from replication_support import CONFIG, TOPIC_ID, TP, Cluster, InProcessLeader

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from tiercel.config.broker_config import BrokerConfig
from tiercel.config.log_config import LogConfig
from tiercel.config.remote_log_manager_config import RemoteLogManagerConfig
from tiercel.protocol.record_batch import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, iter_batches
from tiercel.protocol.records import decode_records
from tiercel.server.replication.fetch_state import InitialFetchState
from tiercel.server.replication.replica_fetcher import ReplicaFetcher
from tiercel.storage.log_values import FetchIsolation
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.remote_index_cache import RemoteIndexCache
from tiercel.tiered.remote_log_reader import RemoteLogReader, RemoteStorageFetchInfo
from tiercel.tiered.remote_storage_thread_pool import RemoteStorageThreadPool
from tiercel.tiered.rlm_copy_task import RLMCopyTask
from tiercel.tiered.rlm_expiration_task import RLMExpirationTask
from tiercel.tiered.rlm_follower_task import RLMFollowerTask
from tiercel.tiered.rlm_quota import RLMQuota
from tiercel.tiered.rlm_task import RLMContext
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_listing import list_remote_segments
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)

PARTITION = TopicIdPartition(TOPIC_ID, TP)
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
# Tiered; segments roll only where a scenario rolls them; no time retention (the record
# timestamps are old); local retention keeps nothing the remote tier has.
TIERED = LogConfig(
    file_delete_delay_ms=0,
    message_timestamp_after_max_ms=2**62,
    retention_ms=-1,
    remote_storage_enable=True,
    local_retention_bytes_config=1,
)
assert CONFIG.file_delete_delay_ms == TIERED.file_delete_delay_ms
RLM_CONFIG = RemoteLogManagerConfig.from_broker(
    BrokerConfig({"remote.log.storage.system.enable": "true"})
)


class Tier:
    """The shared remote tier and a RemoteLogManager context per broker."""

    def __init__(self, root: Path) -> None:
        self.rsm = LocalTieredStorage(str(root / "remote"))
        self.rlmm = InMemoryRemoteLogMetadataManager()
        self.rlmm.on_partition_leadership_changes({PARTITION}, set())
        self.pool = RemoteStorageThreadPool("scenario-reader", threads=1, max_pending_tasks=8)
        self.reader = RemoteLogReader(
            self.rsm, self.rlmm, RemoteIndexCache(self.rsm, str(root / "index-cache")), self.pool
        )
        self._executors: list[concurrent.futures.ThreadPoolExecutor] = []
        self._contexts: dict[int, RLMContext] = {}

    def context(self, broker_id: int) -> RLMContext:
        if broker_id not in self._contexts:
            pools = [concurrent.futures.ThreadPoolExecutor(1) for _ in range(2)]
            self._executors += pools
            self._contexts[broker_id] = RLMContext(
                RLM_CONFIG, broker_id, self.rsm, self.rlmm, pools[0], pools[1], RLMQuota(2**62)
            )
        return self._contexts[broker_id]

    def close(self) -> None:
        self.reader.close()
        for pool in self._executors:
            pool.shutdown(wait=True)

    async def copy(self, c: Cluster, broker_id: int) -> RLMCopyTask:
        """One round of the copy task a new leader of the current epoch starts."""
        partition = c[broker_id]
        task = RLMCopyTask(
            self.context(broker_id), PARTITION, partition.log, partition.state.leader_epoch
        )
        assert await task.run_guarded()
        return task

    async def expire(self, c: Cluster, broker_id: int) -> list[RemoteLogSegmentMetadata]:
        """One round of the leader's expiration task; the segments it deleted."""
        before = {m.remote_log_segment_id: m for m in self.segments(None)}
        task = RLMExpirationTask(self.context(broker_id), PARTITION, c[broker_id].log)
        assert await task.run_guarded()
        after = {m.remote_log_segment_id for m in self.segments(None)}
        return [m for i, m in before.items() if i not in after]

    async def follow(self, c: Cluster, broker_id: int) -> None:
        """One round of a follower's task: its highest remote offset."""
        task = RLMFollowerTask(self.context(broker_id), PARTITION, c[broker_id].log)
        assert await task.run_guarded()

    def segments(
        self, state: RemoteLogSegmentState | None = FINISHED
    ) -> list[RemoteLogSegmentMetadata]:
        return [
            m
            for m in self.rlmm.list_remote_log_segments(PARTITION)
            if state is None or m.state == state
        ]

    def finished(self) -> list[tuple[int, int, dict[int, int]]]:
        """(start, end, epochs) of the COPY_SEGMENT_FINISHED segments, in that order."""
        found = [
            (m.start_offset, m.end_offset, dict(m.segment_leader_epochs)) for m in self.segments()
        ]
        return sorted(found, key=lambda s: (s[0], s[1], sorted(s[2].items())))

    def listed(self) -> list[tuple[int, int, dict[int, int]]]:
        """`finished` as the object store's listing alone has it (the manifests a
        reader without the metadata topic plans from)."""
        found = [
            (m.start_offset, m.end_offset, dict(m.segment_leader_epochs))
            for s in list_remote_segments(self.rsm.store, TP)
            if s.manifest is not None
            for m in [s.manifest.metadata]
        ]
        return sorted(found, key=lambda s: (s[0], s[1], sorted(s[2].items())))

    def fetcher(self, c: Cluster, follower: int) -> tuple[ReplicaFetcher, InProcessLeader]:
        """``follower``'s fetcher from its current leader, with this tier's reader."""
        endpoint = c.endpoint(follower)
        partition = c[follower]
        fetcher = ReplicaFetcher(
            endpoint, lambda tp: c[follower] if tp == TP else None, 1 << 20, 0, lambda: self.reader
        )
        state = partition.state
        fetcher.add_partitions(
            {
                TP: InitialFetchState(
                    TOPIC_ID, state.leader, state.leader_epoch, partition.initial_fetch_offset()
                )
            }
        )
        return fetcher, endpoint

    async def consume(self, log: UnifiedLog) -> list[tuple[int, bytes]]:
        """(offset, value) of every committed record of ``log`` from its log start:
        below the local start through the remote reader (with this log's epoch cache),
        then from the local log, as a consumer fetching from its leader gets them."""
        out: list[tuple[int, bytes]] = []
        offset = log.log_start_offset
        while offset < log.high_watermark:
            if offset < log.local_log_start_offset:
                info = RemoteStorageFetchInfo(1 << 20, True, PARTITION, offset)
                data = bytes((await self.reader.read(info, log.leader_epoch_cache)).records)
            else:
                data = bytes(log.read(offset, 1 << 20, FetchIsolation.HIGH_WATERMARK, True).records)
            assert data, f"nothing read at offset {offset}"
            for pos, header in iter_batches(data):
                size = header.batch_length + LOG_OVERHEAD
                records = decode_records(
                    data[: pos + size], header.records_count, pos + RECORD_BATCH_OVERHEAD
                )
                for record in records:
                    at = header.base_offset + record.offset_delta
                    if offset <= at < log.high_watermark:
                        assert record.value is not None
                        out.append((at, record.value))
                offset = max(offset, header.base_offset + header.last_offset_delta + 1)
                if offset >= log.high_watermark:
                    break
        return out


def msgs(*numbers: int) -> list[bytes]:
    return [f"msg {n}".encode() for n in numbers]


def consumed(*numbers: int, start: int = 0) -> list[tuple[int, bytes]]:
    """What a consumer reading from ``start`` gets: msg ``numbers[i]`` at offset start+i."""
    return list(enumerate(msgs(*numbers), start))


def offsets_in_remote(tier: Tier) -> Iterator[int]:
    seen = set()
    for m in tier.segments():
        for offset in range(m.start_offset, m.end_offset + 1):
            if offset not in seen:
                seen.add(offset)
                yield offset
