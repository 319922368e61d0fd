"""Whether a remote segment lies on a log's leader-epoch lineage (Kafka's
RemoteLogManager.isRemoteSegmentWithinLeaderEpochs).

After an unclean election the remote tier may hold uploads of the same offsets by
different leaders; only those whose epochs and epoch boundaries agree with the local
leader-epoch cache belong to this log. Pure functions over values: any thread.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from tiercel.storage.epoch_entry import EpochEntry
from tiercel.tiered.rsm.remote_storage_manager import RemoteLogSegmentMetadata

__all__ = ["is_remote_segment_within_leader_epochs"]


def _with_records(epochs: Mapping[int, int]) -> list[tuple[int, int]]:
    """The segment's (epoch, start) pairs without epochs that hold no record (an entry
    whose successor starts at the same offset: Kafka's buildFilteredLeaderEpochMap)."""
    entries = sorted(epochs.items())
    return [
        (epoch, start)
        for i, (epoch, start) in enumerate(entries)
        if i + 1 == len(entries) or entries[i + 1][1] != start
    ]


def is_remote_segment_within_leader_epochs(
    segment: RemoteLogSegmentMetadata, log_end_offset: int, lineage: Sequence[EpochEntry]
) -> bool:
    """True if ``segment``'s epochs are a slice of ``lineage`` (the epoch cache's entries,
    oldest first) and it ends below ``log_end_offset``."""
    if not lineage:
        return False
    starts = {entry.epoch: entry.start_offset for entry in lineage}
    epochs = [entry.epoch for entry in lineage]
    segment_epochs = _with_records(segment.segment_leader_epochs)
    last_epoch = segment_epochs[-1][0]
    if last_epoch < epochs[0] or last_epoch > epochs[-1]:
        return False
    # The lineage may have lost its oldest epochs to retention: the segment's first
    # epoch still on it is where the comparison starts.
    first_epoch = next((e for e, _ in segment_epochs if e >= epochs[0]), None)
    if first_epoch is None:
        return False
    for i, (epoch, start) in enumerate(segment_epochs):
        if epoch < first_epoch:
            continue
        if epoch not in starts:
            return False
        slot = bisect.bisect_left(epochs, epoch)
        if epoch == first_epoch and slot > 0 and start < starts[epoch]:
            return False
        following = lineage[slot + 1] if slot + 1 < len(lineage) else None
        if epoch == last_epoch:
            if following is not None and segment.end_offset > following.start_offset - 1:
                return False
        else:
            segment_next = segment_epochs[i + 1]
            if following is None or (following.epoch, following.start_offset) != segment_next:
                return False
    return segment.end_offset < log_end_offset
