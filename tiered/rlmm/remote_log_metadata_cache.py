"""One partition's remote segments, indexed by leader epoch (Kafka's RemoteLogMetadataCache
and RemoteLogLeaderEpochState).

Every segment is kept by id in whatever state it is. Per leader epoch, the
COPY_SEGMENT_FINISHED segments are indexed by the first offset the epoch has in each, so
that `remote_log_segment_metadata(epoch, offset)` looks from the floor entry down for a
segment whose run of the epoch reaches the offset; segments of the epoch
in any other state are "unreferenced" (a copy in progress, or being deleted), listed but
never served. An epoch's highest offset is the largest end offset of that epoch in the
segments that are COPY_SEGMENT_FINISHED now: unlike Kafka's highestLogOffset, which
never goes down, a segment being deleted stops counting, so a leader never counts
records whose objects are going away as copied (Kafka deletes a segment only once
retention or the log start offset has taken its records; a deletion planned while a
segment was unfinished may land just after another broker's late COPY_SEGMENT_FINISHED).

A finished segment that reaches a start offset already indexed for an epoch (a new
leader re-uploading after an unclean election) serves before the older one there, which
still serves the offsets of the epoch only it reaches (Kafka makes it unreferenced; the
expiration task here deletes segments off the lineage, so the older one may be the
lineage's). Which one an epoch serves first thus depends on the order segments finished
in, so the cache remembers it: a snapshot replays finished segments in that
order (`segments_in_replay_order`).

Not thread-safe: its owner calls it from the event loop.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
)

__all__ = ["RemoteLogMetadataCache", "epoch_end_offsets"]


def epoch_end_offsets(metadata: RemoteLogSegmentMetadata) -> Iterator[tuple[int, int, int]]:
    """(epoch, first offset, last offset) of each leader epoch in the segment: an epoch
    ends just before the next one starts, the last at the segment's end offset."""
    entries = sorted(metadata.segment_leader_epochs.items())
    for i, (epoch, start) in enumerate(entries):
        end = entries[i + 1][1] - 1 if i + 1 < len(entries) else metadata.end_offset
        yield epoch, start, end


@dataclass(slots=True)
class _LeaderEpochState:
    """Kafka's RemoteLogLeaderEpochState. Invariant: ``starts`` is sorted and holds the
    keys of ``offset_to_ids``, each a non-empty list of finished segments in the order
    they finished (the newest serves first)."""

    offset_to_ids: dict[int, list[RemoteLogSegmentId]] = field(default_factory=dict)
    starts: list[int] = field(default_factory=list)
    unreferenced: set[RemoteLogSegmentId] = field(default_factory=set)
    # The end offset of this epoch in each finished segment.
    ends: dict[RemoteLogSegmentId, int] = field(default_factory=dict)
    # The start of each finished segment whose transaction index is not known empty,
    # sorted, once per such segment (KIP-1058: read_committed fetches skip the others).
    txn_index_starts: list[int] = field(default_factory=list)

    def copy_started(self, segment_id: RemoteLogSegmentId) -> None:
        self.unreferenced.add(segment_id)

    def copy_finished(
        self, start: int, segment_id: RemoteLogSegmentId, end: int, has_txn_index: bool
    ) -> None:
        if has_txn_index and segment_id not in self.ends:
            bisect.insort(self.txn_index_starts, start)
        ids = self.offset_to_ids.get(start)
        if ids is None:
            bisect.insort(self.starts, start)
            self.offset_to_ids[start] = [segment_id]
        elif segment_id not in ids:
            ids.append(segment_id)
        self.unreferenced.discard(segment_id)
        self.ends[segment_id] = end

    @property
    def highest_log_offset(self) -> int | None:
        return max(self.ends.values()) if self.ends else None

    def delete_started(
        self, start: int, segment_id: RemoteLogSegmentId, has_txn_index: bool
    ) -> None:
        if has_txn_index and segment_id in self.ends:
            del self.txn_index_starts[bisect.bisect_left(self.txn_index_starts, start)]
        ids = self.offset_to_ids.get(start)
        if ids is not None and segment_id in ids:
            ids.remove(segment_id)
            if not ids:
                del self.offset_to_ids[start]
                self.starts.remove(start)
        self.ends.pop(segment_id, None)
        self.unreferenced.add(segment_id)

    def delete_finished(self, segment_id: RemoteLogSegmentId) -> None:
        self.unreferenced.discard(segment_id)

    def candidates(self, offset: int) -> Iterator[RemoteLogSegmentId]:
        """Finished segments whose run of this epoch starts at or below ``offset``: the
        nearest start first, the newest first at each start."""
        for i in range(bisect.bisect_right(self.starts, offset) - 1, -1, -1):
            yield from reversed(self.offset_to_ids[self.starts[i]])

    def serving_ids(self) -> set[RemoteLogSegmentId]:
        """The newest finished segment at each start (Kafka's offsetToId values)."""
        return {ids[-1] for ids in self.offset_to_ids.values()}

    def segment_ids(self) -> set[RemoteLogSegmentId]:
        return {i for ids in self.offset_to_ids.values() for i in ids} | self.unreferenced

    @property
    def empty(self) -> bool:
        return not self.offset_to_ids and not self.unreferenced


class RemoteLogMetadataCache:
    """The remote segments of one partition (see the module docstring)."""

    def __init__(self) -> None:
        self._segments: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self._epochs: dict[int, _LeaderEpochState] = {}
        # COPY_SEGMENT_FINISHED segments in the order they finished (dicts keep it).
        self._finished: dict[RemoteLogSegmentId, None] = {}

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """A copy started (Kafka's addCopyInProgressSegment); replaying the same add is a
        no-op."""
        if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"a new segment is COPY_SEGMENT_STARTED, not {metadata.state.name}")
        segment_id = metadata.remote_log_segment_id
        existing = self._segments.get(segment_id)
        if existing is not None and existing.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            return  # a replay of the metadata topic: the later state stands
        self._segments[segment_id] = metadata
        for epoch in metadata.segment_leader_epochs:
            self._epochs.setdefault(epoch, _LeaderEpochState()).copy_started(segment_id)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Apply a state change (Kafka's updateRemoteLogSegmentMetadata)."""
        segment_id = update.remote_log_segment_id
        existing = self._segments.get(segment_id)
        if existing is None:
            raise RemoteResourceNotFoundError(f"no remote segment {segment_id}")
        if not existing.state.is_valid_transition(update.state):
            raise ValueError(
                f"remote segment {segment_id} cannot go from {existing.state.name} "
                f"to {update.state.name}"
            )
        metadata = existing.create_with_updates(update)
        if update.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
            del self._segments[segment_id]
        else:
            self._segments[segment_id] = metadata
        if update.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            self._finished.setdefault(segment_id)
        else:
            self._finished.pop(segment_id, None)
        for epoch, start, end in epoch_end_offsets(metadata):
            state = self._epochs.setdefault(epoch, _LeaderEpochState())
            match update.state:
                case RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                    state.copy_finished(start, segment_id, end, not metadata.txn_idx_empty)
                case RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
                    state.delete_started(start, segment_id, not metadata.txn_idx_empty)
                case RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                    state.delete_finished(segment_id)
                    if state.empty:
                        del self._epochs[epoch]

    def segment_metadata(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        """The segment in whatever state it is, if known."""
        return self._segments.get(segment_id)

    def remote_log_segment_metadata(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """A finished segment holding ``offset`` of ``leader_epoch``: of those whose run
        of the epoch reaches ``offset``, the nearest start's, the newest there. After an
        unclean election several segments may start an epoch at the same offset, their
        runs of it ending at different offsets; a record is one epoch's at one offset
        whichever segment holds it (KIP-101), so any that reaches ``offset`` serves it,
        and deleting one (off the lineage) leaves the others serving."""
        state = self._epochs.get(leader_epoch)
        if state is None:
            return None
        for segment_id in state.candidates(offset):
            metadata = self._segments[segment_id]
            for epoch, _, end in epoch_end_offsets(metadata):
                if epoch == leader_epoch and offset <= end:
                    return metadata
        return None

    def next_segment_with_txn_index(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """Kafka's nextSegmentWithTxnIndex (KIP-1058): the first finished segment of
        ``leader_epoch`` at or after ``offset`` (the one holding it, else one starting
        after it) whose transaction index is not known empty. The segments between are
        passed over through the epoch's sorted starts of such segments, not looked up
        one by one as Kafka's walk does: per read_committed fetch, that walk over a tier
        of hundreds of segments cost more than the read. A gap in the epoch's segments
        (Kafka's walk stops at one) is passed over too: the aborted transactions a
        later segment lists are filtered by the fetched range all the same."""
        state = self._epochs.get(leader_epoch)
        if state is None:
            return None
        holding = self.remote_log_segment_metadata(leader_epoch, offset)
        if holding is not None and not holding.txn_idx_empty:
            return holding
        starts = state.txn_index_starts
        for start in starts[bisect.bisect_right(starts, offset) :]:
            found = self.remote_log_segment_metadata(leader_epoch, start)
            if found is not None and not found.txn_idx_empty:
                return found
        return None

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        state = self._epochs.get(leader_epoch)
        return state.highest_log_offset if state is not None else None

    def list_remote_log_segments(
        self, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments in any state, by start offset (then id, for a stable order)."""
        if leader_epoch is None:
            segments = list(self._segments.values())
        else:
            state = self._epochs.get(leader_epoch)
            ids = state.segment_ids() if state is not None else set()
            segments = [self._segments[i] for i in ids if i in self._segments]
        return sorted(segments, key=lambda m: (m.start_offset, m.remote_log_segment_id.id))

    def segments_in_replay_order(self) -> list[RemoteLogSegmentMetadata]:
        """Every segment, in an order that rebuilds this cache when replayed through
        `restore`: those not COPY_SEGMENT_FINISHED first (their order does not matter),
        then the finished ones in the order they finished."""
        others = [m for i, m in self._segments.items() if i not in self._finished]
        return others + [self._segments[i] for i in self._finished]

    def restore(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Add a segment from a snapshot: as a copy started, then moved to its state.
        A DELETE_SEGMENT_STARTED segment does not count towards its epochs' highest
        offsets, here as before the restart."""
        self.add_copy_in_progress_segment(
            replace(metadata, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
        )
        if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            self.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    metadata.remote_log_segment_id,
                    metadata.event_timestamp_ms,
                    metadata.state,
                    metadata.broker_id,
                    metadata.custom_metadata,
                )
            )

    def remote_log_size(self, leader_epoch: int) -> int:
        state = self._epochs.get(leader_epoch)
        if state is None:
            return 0
        return sum(self._segments[i].segment_size_in_bytes for i in state.serving_ids())

    def __len__(self) -> int:
        return len(self._segments)
