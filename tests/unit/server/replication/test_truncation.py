"""offset_truncation_state with the leader's and the follower's epoch caches: the rounds
of OffsetForLeaderEpoch a follower goes through (KIP-101, KIP-279) end exactly where its
log stops agreeing with the leader's."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.protocol.errors import ErrorCode
from tiercel.server.replication.fetch_state import EpochEndOffset, OffsetTruncationState
from tiercel.server.replication.truncation import offset_truncation_state
from tiercel.storage.leader_epoch_cache import LeaderEpochFileCache
from tiercel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


def cache(entries: list[tuple[int, int]]) -> LeaderEpochFileCache:
    c = LeaderEpochFileCache(TP, None)
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def follower_view(c: LeaderEpochFileCache, log_end_offset: int) -> tuple[object, int]:
    def own(epoch: int) -> tuple[int, int] | None:
        found, end = c.end_offset_for(epoch, log_end_offset)
        return None if end < 0 else (found, end)

    return own, log_end_offset


def test_kip_279_epoch_end_offset_example() -> None:
    leader = cache([(2, 30), (3, 50), (4, 70)])
    answer = leader.end_offset_for(2, 80)
    assert answer == (2, 50)
    for follower_end, expected in ((55, 50), (45, 45)):
        follower = cache([(2, 30)])
        own, end = follower_view(follower, follower_end)
        state = offset_truncation_state(
            EpochEndOffset(ErrorCode.none, *answer),
            own,
            end,
            end,  # type: ignore[arg-type]
        )
        assert state == OffsetTruncationState(expected, True)


def test_undefined_answers() -> None:
    def own(epoch: int) -> tuple[int, int] | None:
        return None

    # No end offset: back to the initial fetch offset.
    assert offset_truncation_state(EpochEndOffset(ErrorCode.none), own, 40, 12) == (
        OffsetTruncationState(12, True)
    )
    # An offset without an epoch (a leader without epochs): never above the own end.
    assert offset_truncation_state(EpochEndOffset(ErrorCode.none, -1, 50), own, 40, 40) == (
        OffsetTruncationState(40, True)
    )
    # A follower without epochs at or below the answer takes the leader's end offset.
    assert offset_truncation_state(EpochEndOffset(ErrorCode.none, 3, 25), own, 40, 40) == (
        OffsetTruncationState(25, True)
    )


@st.composite
def histories(
    draw: st.DrawFn,
) -> tuple[list[tuple[int, int]], int, list[tuple[int, int]], int, int]:
    """Two replicas' epoch lineages that agree up to some point.

    Shared epochs with their lengths; the last shared epoch's leader wrote more, of which
    each replica has a prefix; then each replica led epochs of its own (epochs are never
    reused: a term has one leader), the current leader last, having just begun its
    current epoch. Returns (leader entries, leader end, follower entries, follower end,
    the offset where the two logs stop agreeing)."""
    shared = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    epoch = 0
    offset = 0
    entries: list[tuple[int, int]] = []
    for i, length in enumerate(shared):
        epoch += draw(st.integers(1, 2))
        entries.append((epoch, offset))
        if i < len(shared) - 1:
            offset += length
    last_epoch_written = shared[-1]
    leader_has = draw(st.integers(0, last_epoch_written))
    follower_has = draw(st.integers(0, last_epoch_written))
    agreed = offset + min(leader_has, follower_has)
    later = draw(st.lists(st.booleans(), max_size=4))  # who led each later epoch
    leader, follower = list(entries), list(entries)
    leader_end, follower_end = offset + leader_has, offset + follower_has
    for follower_led in later:
        epoch += draw(st.integers(1, 2))
        length = draw(st.integers(1, 5))
        if follower_led:
            follower.append((epoch, follower_end))
            follower_end += length
        else:
            leader.append((epoch, leader_end))
            leader_end += length
    # The current leader's epoch, recorded at its log end when it took over.
    leader.append((epoch + 1, leader_end))
    return leader, leader_end, follower, follower_end, agreed


@settings(max_examples=300, deadline=None)
@given(histories())
def test_follower_truncates_exactly_to_the_agreeing_prefix(
    history: tuple[list[tuple[int, int]], int, list[tuple[int, int]], int, int],
) -> None:
    leader_entries, leader_end, follower_entries, follower_end, agreed = history
    leader = cache(leader_entries)
    follower = cache(follower_entries)
    follower.truncate_from_end(follower_end)
    end = follower_end
    for _ in range(len(follower_entries) + 1):
        latest = follower.latest_epoch
        if latest is None:
            break  # an empty log: nothing to compare, nothing to cut
        answer = EpochEndOffset(ErrorCode.none, *leader.end_offset_for(latest, leader_end))
        own, _ = follower_view(follower, end)
        state = offset_truncation_state(answer, own, end, end)  # type: ignore[arg-type]
        assert state.offset <= end
        end = state.offset
        follower.truncate_from_end(end)
        if state.truncation_completed:
            break
    else:
        raise AssertionError("truncation did not complete")
    assert end == agreed
