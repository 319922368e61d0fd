"""A log's ListOffsets answers across both tiers (Kafka's UnifiedLog.fetchOffsetByTimestamp
with its RemoteLogManager, KIP-405, KIP-1005, KIP-1023).

- EARLIEST (-2): the log start offset, remote records included.
- EARLIEST_LOCAL (-4): the first offset on local disk.
- LATEST_TIERED (-5): the highest offset in the remote tier, with its epoch; -1 (epoch
  -1) while nothing is remote or tiering is off.
- EARLIEST_PENDING_UPLOAD (-6): the first offset not yet remote. Tiering off: -1. On,
  with nothing known remote: the log start when nothing was ever uploaded (local start
  equals log start), else -1 (a new leader not yet told what was uploaded).
- A timestamp: the remote segments first, from the log start, then the local log from
  the local start; the remote lookup bounded by the request's timeout (v10+, KIP-1075)
  or remote.list.offsets.request.timeout.ms.

Event-loop only; remote lookups go through the reader pool.
"""

from __future__ import annotations

import asyncio
from typing import Final

from tiercel.protocol.errors import RequestTimedOutError, UnknownServerError
from tiercel.protocol.list_offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    MAX_TIMESTAMP,
)
from tiercel.server.remote_log_reads import RemoteLogReads
from tiercel.storage.log_values import NO_TIMESTAMP, TimestampAndOffset
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.remote_storage_thread_pool import RejectedExecutionError
from tiercel.tiered.rsm.remote_storage_manager import RemoteStorageError

__all__ = ["DEFAULT_REMOTE_LIST_OFFSETS_TIMEOUT_MS", "fetch_offset_by_timestamp"]

# remote.list.offsets.request.timeout.ms default (Kafka, KIP-1075): the bound of a remote
# lookup for ListOffsets before v10, which carries its own timeout.
DEFAULT_REMOTE_LIST_OFFSETS_TIMEOUT_MS: Final = 30_000

_NOTHING_REMOTE = TimestampAndOffset(NO_TIMESTAMP, -1, -1)


def _at(log: UnifiedLog, offset: int) -> TimestampAndOffset:
    return TimestampAndOffset(NO_TIMESTAMP, offset, log.epoch_for_offset(offset))


def _latest_tiered(log: UnifiedLog) -> TimestampAndOffset:
    highest = log.highest_offset_in_remote_storage
    if not log.remote_log_enabled or highest == -1:
        return _NOTHING_REMOTE
    return _at(log, highest)


def _earliest_pending_upload(log: UnifiedLog) -> TimestampAndOffset:
    if not log.remote_log_enabled:
        return _NOTHING_REMOTE
    highest = log.highest_offset_in_remote_storage
    if highest == -1:
        if log.local_log_start_offset == log.log_start_offset:
            return _at(log, log.log_start_offset)  # nothing uploaded yet
        return _NOTHING_REMOTE
    return _at(log, max(highest + 1, log.log_start_offset))


async def fetch_offset_by_timestamp(
    log: UnifiedLog,
    timestamp: int,
    tip: TopicIdPartition,
    remote: RemoteLogReads | None,
    remote_timeout_ms: int = DEFAULT_REMOTE_LIST_OFFSETS_TIMEOUT_MS,
) -> TimestampAndOffset | None:
    """The answer for every ListOffsets timestamp but LATEST (-1), which depends on the
    asker (see the module docstring). A remote lookup longer than ``remote_timeout_ms``
    is REQUEST_TIMED_OUT, as Kafka's DelayedRemoteListOffsets expires."""
    if timestamp == EARLIEST_TIMESTAMP:
        return _at(log, log.log_start_offset)
    if timestamp == EARLIEST_LOCAL_TIMESTAMP:
        return _at(log, log.local_log_start_offset)
    if timestamp == LATEST_TIERED_TIMESTAMP:
        return _latest_tiered(log)
    if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
        return _earliest_pending_upload(log)
    if timestamp == MAX_TIMESTAMP:
        return await log.fetch_max_timestamp()
    empty = log.log_start_offset == log.log_end_offset
    if log.remote_log_enabled and remote is not None and not empty:
        lookup = remote.find_offset_by_timestamp(
            tip, timestamp, log.log_start_offset, log.leader_epoch_cache, log.log_end_offset
        )
        try:
            found = await asyncio.wait_for(lookup, remote_timeout_ms / 1000)
        except TimeoutError as e:
            raise RequestTimedOutError(
                f"the remote timestamp lookup on {tip} took over {remote_timeout_ms} ms"
            ) from e
        except (RejectedExecutionError, RemoteStorageError) as e:
            # Kafka's Errors.forException for these: the partition's error, not a bug.
            raise UnknownServerError(f"remote timestamp lookup on {tip}: {e}") from e
        if found is not None:
            return found
    return await log.fetch_offset_by_timestamp(timestamp)
