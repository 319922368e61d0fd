"""Replaying a coordinator's internal-topic partition on leadership (Kafka's
CoordinatorLoaderImpl.load): read the log from its start to its end as of now, chunk by
chunk, parse each chunk off the event loop and apply it in log order; give up as soon as
the partition is no longer wanted (leadership moved meanwhile). Shared by the group
coordinator (`__consumer_offsets`) and the transaction coordinator
(`__transaction_state`), which differ only in how a chunk parses and applies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from tiercel.storage.log_values import FetchIsolation
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog

__all__ = ["ParsedLogChunk", "ReplayTarget", "replay_log"]


class ParsedLogChunk(Protocol):
    """What parsing a chunk of whole batches gives: the records, in log order, where the
    next chunk starts, and how many records were skipped as unreadable."""

    @property
    def next_offset(self) -> int: ...

    @property
    def skipped(self) -> int: ...


ChunkT = TypeVar("ChunkT", bound=ParsedLogChunk)
TargetT = TypeVar("TargetT", bound="ReplayTarget")


class ReplayTarget(Protocol):
    skipped: int


async def replay_log(
    log: UnifiedLog,
    scheduler: Scheduler,
    buffer_size: int,
    still_wanted: Callable[[], bool],
    parse_chunk: Callable[[bytes], ChunkT],
    apply: Callable[[ChunkT], None],
    loaded: TargetT,
) -> TargetT | None:
    """Read ``log`` from its start to its current end into ``loaded`` (``apply`` each
    parsed chunk, skipped records counted); None if ``still_wanted`` turned false
    meanwhile (the partition moved away)."""
    offset = log.log_start_offset
    end = log.log_end_offset
    while offset < end:
        if not still_wanted():
            return None
        info = log.read(offset, buffer_size, FetchIsolation.LOG_END, True)
        if not info.records:
            break
        chunk = await scheduler.run_blocking(parse_chunk, bytes(info.records))
        if chunk.next_offset <= offset:
            break
        apply(chunk)
        loaded.skipped += chunk.skipped
        offset = chunk.next_offset
    return loaded if still_wanted() else None
