"""Whether a remote segment lies on a log's leader-epoch lineage (Kafka's
RemoteLogManager.isRemoteSegmentWithinLeaderEpochs and buildFilteredLeaderEpochMap), and
a segment's epoch entries as the checkpoint file the remote tier stores (KIP-405).

After an unclean election, or a leader change while an old leader was still copying,
the remote tier may hold segments whose epochs or offsets this log never had; readers
must not see them and the expiration task deletes them. Pure; any thread.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from tiercel.storage.epoch_entry import EpochEntry
from tiercel.tiered.rsm.remote_storage_manager import RemoteLogSegmentMetadata

__all__ = [
    "epoch_entries_as_bytes",
    "filtered_leader_epoch_map",
    "is_remote_segment_within_leader_epochs",
    "lineage_end_offset",
]


def filtered_leader_epoch_map(entries: Sequence[EpochEntry] | Mapping[int, int]) -> dict[int, int]:
    """Epoch -> start offset without the epochs that have no records: an epoch whose
    start offset is the next epoch's (Kafka's buildFilteredLeaderEpochMap)."""
    items = (
        sorted(entries.items())
        if isinstance(entries, Mapping)
        else [(e.epoch, e.start_offset) for e in entries]
    )
    return {
        epoch: start
        for i, (epoch, start) in enumerate(items)
        if i + 1 == len(items) or items[i + 1][1] != start
    }


def is_remote_segment_within_leader_epochs(
    metadata: RemoteLogSegmentMetadata, log_end_offset: int, leader_epochs: Mapping[int, int]
) -> bool:
    """Kafka's isRemoteSegmentWithinLeaderEpochs: the segment's epochs (from the first
    one this lineage still has) are this lineage's, each starting where the lineage's
    does (the first may start later) and ending where the lineage's next epoch starts
    (the last may end earlier), and the segment ends below the log end offset.
    ``leader_epochs`` is a `filtered_leader_epoch_map` of the log's epoch cache."""
    if not leader_epochs:
        return False
    lineage = sorted(leader_epochs)
    segment = filtered_leader_epoch_map(metadata.segment_leader_epochs)
    epochs = sorted(segment)
    last = epochs[-1]
    if last < lineage[0] or last > lineage[-1]:
        return False
    first_i = bisect.bisect_left(epochs, lineage[0])
    first = epochs[first_i]
    for i in range(first_i, len(epochs)):
        epoch = epochs[i]
        if epoch not in leader_epochs:
            return False
        j = lineage.index(epoch)
        if epoch == first and j > 0 and segment[epoch] < leader_epochs[epoch]:
            return False
        next_lineage = (
            (lineage[j + 1], leader_epochs[lineage[j + 1]]) if j + 1 < len(lineage) else None
        )
        if epoch == last:
            if next_lineage is not None and metadata.end_offset > next_lineage[1] - 1:
                return False
        elif next_lineage != (epochs[i + 1], segment[epochs[i + 1]]):
            return False
    return metadata.end_offset < log_end_offset


def lineage_end_offset(
    metadata: RemoteLogSegmentMetadata, leader_epochs: Mapping[int, int], offset: int
) -> int:
    """Where the segment's records from ``offset`` on stop being the lineage's: the first
    offset at or after ``offset`` whose epoch in the segment is not its epoch in
    ``leader_epochs`` (a `filtered_leader_epoch_map`), or the segment's end + 1;
    ``offset`` itself when that offset is already off the lineage. A record is the one
    its epoch wrote at its offset (KIP-101), so the segment holds the lineage's records
    exactly below this offset, also when it continues on another lineage after an
    unclean election (KIP-405 scenarios 3 to 5)."""
    segment = sorted(filtered_leader_epoch_map(metadata.segment_leader_epochs).items())
    lineage = sorted(leader_epochs.items())
    i = bisect.bisect_right([start for _, start in segment], offset) - 1
    if i < 0 or segment[i][0] not in leader_epochs or leader_epochs[segment[i][0]] > offset:
        return offset
    j = [epoch for epoch, _ in lineage].index(segment[i][0])
    segment_end = metadata.end_offset + 1
    while True:
        segment_next = segment[i + 1][1] if i + 1 < len(segment) else segment_end
        lineage_next = lineage[j + 1][1] if j + 1 < len(lineage) else segment_end
        if i + 1 == len(segment) or segment_next != lineage_next:
            return min(segment_next, lineage_next, segment_end)
        if segment[i + 1][0] != lineage[j + 1][0]:
            return segment_next
        i, j = i + 1, j + 1


def epoch_entries_as_bytes(entries: Sequence[EpochEntry]) -> bytes:
    """``entries`` in the leader-epoch-checkpoint file format (version 0), as Kafka's
    epochEntriesAsByteBuffer: what the remote tier stores with a segment."""
    lines = ["0", str(len(entries)), *(f"{e.epoch} {e.start_offset}" for e in entries)]
    return ("\n".join(lines) + "\n").encode()
