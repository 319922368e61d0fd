"""Where a follower truncates, from the leader's end offset for an epoch (KIP-101/279).

The follower asked the leader (OffsetForLeaderEpoch, or a Fetch answered with a
diverging epoch) where its latest epoch ends; the leader answered (epoch, end offset)
for the largest epoch it knows at or below the one asked. Kafka's
``AbstractFetcherThread.getOffsetTruncationState``:

- end offset undefined: the leader knows nothing of the lineage — truncate to the
  initial fetch offset (the high watermark when the fetch started there);
- the follower knows the epoch the leader answered with: truncate to the smaller of the
  two end offsets of that epoch (and never above the own log end) — done;
- the follower does not know it (KIP-279: several leader changes in a row): truncate to
  the end of the follower's largest epoch below it, and ask again with the then latest
  epoch;
- the follower has no epochs at or below it: take the leader's end offset.

For example: leader epochs 2→30, 3→50, 4→70, a follower asking for epoch 2 gets (2, 50);
a follower whose epoch 2 ends at 55 truncates to 50, one whose epoch 2 ends at 45 keeps
its log (45).
"""

from __future__ import annotations

from collections.abc import Callable

from tiercel.server.replication.fetch_state import EpochEndOffset, OffsetTruncationState

# The follower's own end offset for an epoch: (epoch, end offset) or None if undefined.
EndOffsetForEpoch = Callable[[int], tuple[int, int] | None]


def offset_truncation_state(
    leader: EpochEndOffset,
    follower_end_offset_for_epoch: EndOffsetForEpoch,
    follower_log_end_offset: int,
    initial_fetch_offset: int,
) -> OffsetTruncationState:
    if leader.end_offset < 0:
        return OffsetTruncationState(initial_fetch_offset, True)
    if leader.leader_epoch < 0:
        # A leader without epoch support answers only an offset.
        return OffsetTruncationState(min(leader.end_offset, follower_log_end_offset), True)
    own = follower_end_offset_for_epoch(leader.leader_epoch)
    if own is None:
        return OffsetTruncationState(min(leader.end_offset, follower_log_end_offset), True)
    own_epoch, own_end = own
    if own_epoch != leader.leader_epoch:
        return OffsetTruncationState(min(own_end, follower_log_end_offset), False)
    return OffsetTruncationState(min(own_end, leader.end_offset, follower_log_end_offset), True)
