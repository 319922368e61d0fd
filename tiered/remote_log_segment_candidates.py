"""What a leader copies next, and where a new leader continues (Kafka's
RemoteLogManager.candidateLogSegments and findHighestRemoteOffset, KIP-405).

A candidate is a rolled segment, never the active one, holding offsets at or above the
first offset not yet copied, whose last offset (the next segment's base offset - 1) is
below the last stable offset — the high watermark until transactions exist — so the
remote tier only ever holds acknowledged records. Segments are copied in offset order.

A new leader finds the copied offset on its own leader-epoch lineage: walking its epochs
from the latest down, the first epoch with finished remote segments gives
min(highest remote offset of that epoch, that epoch's end offset in this log - 1). An
upload by an old leader beyond where this log's epoch ends is not on this lineage, so
this leader copies its own records from there: no gap, and nothing already finished on
the lineage is uploaded again. Its log start offset is the start of the first remote
segment of its earliest epoch that has one (an old leader's retention may have moved
it past this log's), or its local start.

Event-loop only: reads the log and the metadata manager's view.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tiercel.storage.log_segment import LogSegment
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.rlmm.remote_log_metadata_manager import RemoteLogMetadataManager

__all__ = [
    "EnrichedLogSegment",
    "candidate_log_segments",
    "find_highest_remote_offset",
    "find_log_start_offset",
]


@dataclass(frozen=True, slots=True)
class EnrichedLogSegment:
    """A rolled segment and the base offset of the segment after it (Kafka's
    EnrichedLogSegment): its last offset is ``next_segment_offset - 1``."""

    segment: LogSegment
    next_segment_offset: int

    @property
    def end_offset(self) -> int:
        return self.next_segment_offset - 1


def candidate_log_segments(
    log: UnifiedLog, from_offset: int, last_stable_offset: int
) -> list[EnrichedLogSegment]:
    """The segments to copy, in offset order (see the module docstring)."""
    segments = log.segments
    candidates = []
    for previous, current in itertools.pairwise(segments):
        if current.base_offset <= from_offset:
            continue  # wholly below from_offset
        if current.base_offset > last_stable_offset:
            break
        candidates.append(EnrichedLogSegment(previous, current.base_offset))
    return candidates


def find_highest_remote_offset(
    rlmm: RemoteLogMetadataManager, partition: TopicIdPartition, log: UnifiedLog
) -> int:
    """The highest offset copied on this log's leader-epoch lineage; -1 when none.
    Only segments COPY_SEGMENT_FINISHED now count (`highest_offset_for_epoch`): an
    upload still in progress, or a segment being deleted, holds nothing a reader gets."""
    cache = log.leader_epoch_cache
    for entry in reversed(cache.entries):
        highest = rlmm.highest_offset_for_epoch(partition, entry.epoch)
        if highest is None:
            continue
        _, end_offset = cache.end_offset_for(entry.epoch, log.log_end_offset)
        return min(highest, end_offset - 1)
    return -1


def find_log_start_offset(
    rlmm: RemoteLogMetadataManager, partition: TopicIdPartition, log: UnifiedLog
) -> int:
    """Kafka's findLogStartOffset: walking this log's epochs from the earliest up, the
    start of the first remote segment of the first epoch that has one; otherwise the
    local log start offset."""
    for entry in log.leader_epoch_cache.entries:
        remote = rlmm.list_remote_log_segments(partition, entry.epoch)
        if remote:
            return remote[0].start_offset
    return log.local_log_start_offset
