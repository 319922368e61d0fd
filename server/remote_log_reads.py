"""What the fetch and ListOffsets paths need of the RemoteLogManager (Kafka's
ReplicaManager holds its RemoteLogManager for the same calls): remote reads, remote
timestamp lookups, and the RSM and RLMM a follower builds its remote log aux state with
(in its fetcher's own thread, not the reader pool, as Kafka).
`tiercel.tiered.remote_log_reader.RemoteLogReader` provides all of it; the broker's
RemoteLogManager exposes one (or is one) as ``replica_manager.remote_log_manager``.
Event-loop only.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from tiercel.storage.leader_epoch_cache import LeaderEpochFileCache
from tiercel.storage.local_log import LocalLog
from tiercel.storage.log_values import FetchDataInfo, TimestampAndOffset
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.tiered.remote_log_reader import RemoteStorageFetchInfo
from tiercel.tiered.rlmm.remote_log_metadata_manager import RemoteLogMetadataManager
from tiercel.tiered.rsm.remote_storage_manager import RemoteStorageManager

__all__ = ["RemoteLogReads"]


class RemoteLogReads(Protocol):
    @property
    def rsm(self) -> RemoteStorageManager: ...

    @property
    def rlmm(self) -> RemoteLogMetadataManager: ...

    def fetch_throttle_time_s(self) -> float:
        """How long remote reads must wait for the fetch quota (0: they may read)."""

    def async_read(
        self,
        fetch_info: RemoteStorageFetchInfo,
        epoch_cache: LeaderEpochFileCache,
        local_log: LocalLog | None = None,
    ) -> asyncio.Task[FetchDataInfo]:
        """Start a remote read; RejectedExecutionError when the reader pool is full.
        A read_committed read searches ``local_log`` for aborted transactions the
        remote segments leave open."""

    async def find_offset_by_timestamp(
        self,
        tip: TopicIdPartition,
        timestamp: int,
        starting_offset: int,
        epoch_cache: LeaderEpochFileCache,
        log_end_offset: int,
    ) -> TimestampAndOffset | None:
        """The first remote record at or after ``starting_offset`` with a timestamp
        >= ``timestamp``, if a remote segment has one."""
