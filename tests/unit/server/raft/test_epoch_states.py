"""The election states one by one: who may grant a vote or a PreVote (a voter never
grants two standard votes in one epoch), the nominees' tallies, the leader's high
watermark rule and its check quorum, the follower's fetch timer."""

from __future__ import annotations

import pytest
from raft_support import MockTime

from tiercel.server.raft.batch_accumulator import BatchAccumulator
from tiercel.server.raft.candidate_state import CandidateState
from tiercel.server.raft.endpoints import Endpoints, HostPort
from tiercel.server.raft.follower_state import FollowerState
from tiercel.server.raft.leader_state import LeaderState
from tiercel.server.raft.prospective_state import ProspectiveState
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.resigned_state import ResignedState
from tiercel.server.raft.unattached_state import UnattachedState
from tiercel.server.raft.voter_set import VoterSet
from tiercel.storage.log_values import LogOffsetMetadata

VOTERS = VoterSet.from_addresses("C", {i: HostPort("h", 9000 + i) for i in (1, 2, 3)})
FIVE = VoterSet.from_addresses("C", {i: HostPort("h", 9000 + i) for i in (1, 2, 3, 4, 5)})
R2, R3 = ReplicaKey(2), ReplicaKey(3)


def unattached(voted: ReplicaKey | None = None, leader: int | None = None) -> UnattachedState:
    return UnattachedState(MockTime(), 5, leader, voted, {1, 2, 3}, None, 1000)


def test_unattached_grants_one_standard_vote_per_epoch() -> None:
    assert unattached().can_grant_vote(R2, is_log_up_to_date=True, is_pre_vote=False)
    assert not unattached().can_grant_vote(R2, is_log_up_to_date=False, is_pre_vote=False)
    voted = unattached(voted=R2)
    assert voted.can_grant_vote(R2, True, False)  # the same candidate, again
    assert not voted.can_grant_vote(R3, True, False)
    assert voted.can_grant_vote(R3, True, True)  # PreVotes bind nothing
    assert not voted.can_grant_vote(R3, False, True)
    assert not unattached(leader=1).can_grant_vote(R2, True, False)


def test_prospective_keeps_its_vote() -> None:
    state = ProspectiveState(MockTime(), 1, 5, None, Endpoints(), R2, VOTERS, None, 1000)
    assert not state.can_grant_vote(R3, True, False)
    assert state.can_grant_vote(R2, True, False)
    assert state.can_grant_vote(R3, True, True)
    assert state.election.voted_key == R2


def test_follower_grants_prevotes_only_before_fetching_from_its_leader() -> None:
    time = MockTime()
    state = FollowerState(time, 5, 1, VOTERS.listeners(1), None, {1, 2, 3}, None, 2000)
    assert state.can_grant_vote(R2, True, True)
    assert not state.can_grant_vote(R2, False, True)
    assert not state.can_grant_vote(R2, True, False)
    state.reset_fetch_timeout_for_successful_fetch(time.now)
    assert not state.can_grant_vote(R2, True, True)


def test_candidate_leader_and_resigned_refuse_standard_votes() -> None:
    time = MockTime()
    candidate = CandidateState(time, ReplicaKey(1), 6, VOTERS, None, 1000)
    resigned = ResignedState(time, 1, 6, {1, 2, 3}, 1000, [], Endpoints())
    for state in (candidate, resigned):
        assert not state.can_grant_vote(R2, True, False)
        assert not state.can_grant_vote(ReplicaKey(1), True, False)
        assert state.can_grant_vote(R2, True, True)
    assert not leader(time).can_grant_vote(R2, True, True)


def test_nominee_tally() -> None:
    candidate = CandidateState(MockTime(), ReplicaKey(1), 6, FIVE, None, 1000)
    election = candidate.epoch_election
    assert election.granting_voters == {1} and not election.is_vote_granted
    assert candidate.record_granted_vote(2)
    assert not candidate.record_granted_vote(2)  # already recorded
    assert not election.is_vote_granted
    candidate.record_rejected_vote(3)
    candidate.record_rejected_vote(4)
    assert not election.is_vote_rejected  # 5 can still make three
    candidate.record_granted_vote(5)
    assert election.is_vote_granted and election.granting_voters == {1, 2, 5}
    with pytest.raises(ValueError, match="ourselves"):
        candidate.record_rejected_vote(1)
    with pytest.raises(ValueError, match="non-voter"):
        candidate.record_granted_vote(9)
    with pytest.raises(ValueError, match="must be in the set of voters"):
        CandidateState(MockTime(), ReplicaKey(9), 6, FIVE, None, 1000)


def test_nominee_loses_once_no_majority_is_possible() -> None:
    prospective = ProspectiveState(MockTime(), 1, 5, None, Endpoints(), None, VOTERS, None, 1000)
    prospective.record_rejected_vote(2)
    assert not prospective.epoch_election.is_vote_rejected
    prospective.record_rejected_vote(3)
    assert prospective.epoch_election.is_vote_rejected


def leader(
    time: MockTime, voters: VoterSet = VOTERS, epoch_start_offset: int = 10
) -> LeaderState[bytes]:
    accumulator = BatchAccumulator(7, epoch_start_offset, 25, 1 << 20, 10, time, IdentitySerde())
    return LeaderState(
        time,
        ReplicaKey(1),
        7,
        epoch_start_offset,
        voters,
        {1, 2},
        accumulator,
        voters.listeners(1),
        2000,
    )


def at(offset: int) -> LogOffsetMetadata:
    return LogOffsetMetadata(offset)


def test_the_high_watermark_waits_for_an_entry_of_the_leaders_epoch() -> None:
    time = MockTime()
    state = leader(time, epoch_start_offset=10)
    assert not state.update_local_state(at(10))
    # A follower at the epoch start: a majority has offset 10, but nothing of epoch 7
    # is committed, so nothing of the earlier epochs may be exposed yet.
    assert not state.update_replica_state(R2, time.now, at(10))
    assert state.high_watermark is None
    assert not state.update_local_state(at(11))  # the LeaderChangeMessage, not replicated
    assert state.high_watermark is None
    assert state.update_replica_state(R2, time.now, at(11))
    assert state.high_watermark == at(11)


def test_the_high_watermark_is_the_majoritys_offset_and_never_goes_back() -> None:
    time = MockTime()
    state = leader(time, FIVE, epoch_start_offset=0)
    state.update_local_state(at(50))
    state.update_replica_state(R2, time.now, at(40))
    assert state.high_watermark is None  # 2 of 5
    assert state.update_replica_state(R3, time.now, at(30))
    assert state.high_watermark == at(30)
    assert state.update_replica_state(ReplicaKey(4), time.now, at(45))
    assert state.high_watermark == at(40)
    # A voter restarting from a lost log reports less: the HW stays.
    assert not state.update_replica_state(R2, time.now, at(5))
    assert state.high_watermark == at(40)
    # Observers do not count.
    assert not state.update_replica_state(ReplicaKey(8), time.now, at(50))
    assert state.high_watermark == at(40)
    assert [k.id for k in state.non_leader_voters_by_descending_fetch_offset()] == [4, 3, 2, 5]


def test_check_quorum_expires_without_fetches_from_a_majority() -> None:
    time = MockTime()
    state = leader(time)
    assert state.time_until_check_quorum_expires(time.now) == 3000  # 1.5 x fetch timeout
    time.sleep(2000)
    state.update_replica_state(R2, time.now, at(10))  # one follower: a majority with us
    time.sleep(2000)
    assert state.time_until_check_quorum_expires(time.now) == 1000
    time.sleep(1000)
    assert state.time_until_check_quorum_expires(time.now) == 0
    single = leader(time, VoterSet.from_addresses("C", {1: HostPort("h", 1)}))
    time.sleep(100_000)
    assert single.time_until_check_quorum_expires(time.now) > 10**9


def test_observers_are_forgotten_after_five_minutes() -> None:
    time = MockTime()
    state = leader(time)
    state.update_replica_state(ReplicaKey(8), time.now, at(3))
    assert list(state.observer_states(time.now)) == [ReplicaKey(8)]
    time.sleep(300_000)
    assert state.observer_states(time.now) == {}


def test_follower_high_watermark_is_monotonic_and_fetch_timer_resets() -> None:
    time = MockTime()
    state = FollowerState(time, 5, 1, VOTERS.listeners(1), None, {1, 2, 3}, None, 2000)
    assert state.update_high_watermark(4) and not state.update_high_watermark(4)
    with pytest.raises(ValueError, match="Non-monotonic"):
        state.update_high_watermark(3)
    time.sleep(1500)
    state.reset_fetch_timeout_for_successful_fetch(time.now)
    time.sleep(1500)
    assert not state.has_fetch_timeout_expired(time.now)
    time.sleep(500)
    assert state.has_fetch_timeout_expired(time.now)
    assert state.leader_node("C").port == 9001
