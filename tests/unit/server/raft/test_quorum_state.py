"""QuorumState: the state a replica restarts in, which transitions are allowed, and that
every durable one reaches quorum-state before it takes effect."""

from __future__ import annotations

import random
import uuid

import pytest
from raft_support import MockQuorumStateStore, MockTime

from tiercel.server.raft.batch_accumulator import BatchAccumulator
from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.endpoints import HostPort
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.quorum_state import QuorumState
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.voter_set import VoterSet

VOTERS = VoterSet.from_addresses("C", {i: HostPort("h", 9000 + i) for i in (1, 2, 3)})
DIRECTORY = uuid.uuid4()
EMPTY_LOG = OffsetAndEpoch(0, 0)


def quorum(
    store: MockQuorumStateStore, local_id: int | None = 1, voters: VoterSet = VOTERS
) -> QuorumState:
    return QuorumState(
        local_id,
        DIRECTORY,
        lambda: voters,
        lambda: 0,
        voters.listeners(local_id) if local_id is not None else VOTERS.listeners(1),
        1000,
        2000,
        store,
        MockTime(),
        random.Random(7),
    )


async def started(
    election: ElectionState | None,
    log_end: OffsetAndEpoch = EMPTY_LOG,
    local_id: int | None = 1,
) -> tuple[QuorumState, MockQuorumStateStore]:
    store = MockQuorumStateStore()
    if election is not None:
        store.writes.append(election)
    state = quorum(store, local_id)
    await state.initialize(log_end)
    return state, store


async def test_a_fresh_replica_starts_unattached_in_epoch_0() -> None:
    state, store = await started(None)
    assert state.is_unattached and state.epoch == 0 and state.leader_id is None
    assert store.writes[-1] == ElectionState.with_unknown_leader(0, {1, 2, 3})
    assert state.is_voter and not state.is_only_voter


async def test_a_leader_restarts_resigned_in_its_epoch() -> None:
    state, _ = await started(ElectionState.with_elected_leader(4, 1, None, {1, 2, 3}))
    assert state.is_resigned and state.epoch == 4 and state.leader_id == 1
    assert not state.can_grant_vote(ReplicaKey(2), True, False)


async def test_a_candidate_restarts_as_candidate_having_voted_for_itself() -> None:
    state, _ = await started(ElectionState.with_voted_candidate(4, ReplicaKey(1), {1, 2, 3}))
    assert state.is_candidate and state.epoch == 4


async def test_a_follower_restarts_following_and_keeps_its_vote() -> None:
    state, _ = await started(ElectionState.with_elected_leader(4, 2, ReplicaKey(2), {1, 2, 3}))
    assert state.is_follower and state.leader_id == 2 and state.voted_key == ReplicaKey(2)
    assert not state.can_grant_vote(ReplicaKey(3), True, False)


async def test_a_leader_without_known_endpoints_leaves_the_replica_unattached() -> None:
    state, _ = await started(ElectionState.with_elected_leader(4, 7, None, {1, 2, 3}))
    assert state.is_unattached and state.leader_id == 7


async def test_a_log_ahead_of_quorum_state_wins() -> None:
    state, _ = await started(
        ElectionState.with_voted_candidate(2, ReplicaKey(3), {1, 2, 3}), OffsetAndEpoch(10, 5)
    )
    assert state.is_unattached and state.epoch == 5 and state.voted_key is None


async def test_an_observer_with_a_vote_persisted_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="without a local id"):
        await started(
            ElectionState.with_voted_candidate(2, ReplicaKey(3), {1, 2, 3}), local_id=None
        )


async def test_votes_are_durable_before_they_count() -> None:
    state, store = await started(None)
    await state.transition_to_unattached(3)
    await state.unattached_add_voted_state(3, ReplicaKey(2))
    assert store.writes[-1] == ElectionState.with_voted_candidate(3, ReplicaKey(2), {1, 2, 3})
    with pytest.raises(RuntimeError, match="Cannot add voted key"):
        await state.unattached_add_voted_state(3, ReplicaKey(3))  # a second vote
    # The leader it then learns of keeps the vote in the epoch.
    await state.transition_to_follower(3, 2, VOTERS.listeners(2))
    assert store.writes[-1] == ElectionState.with_elected_leader(3, 2, ReplicaKey(2), {1, 2, 3})


async def test_election_path_prospective_candidate_leader() -> None:
    state, store = await started(None)
    with pytest.raises(RuntimeError, match="Cannot transition to Candidate"):
        await state.transition_to_candidate()
    writes = len(store.writes)
    state.transition_to_prospective()
    assert state.is_prospective and state.epoch == 0 and len(store.writes) == writes  # soft
    await state.transition_to_candidate()
    assert state.epoch == 1 and store.writes[-1].voted_key == state.local_replica_key
    with pytest.raises(RuntimeError, match="without majority"):
        await state.transition_to_leader(0, accumulator(1))
    state.candidate_state().record_granted_vote(3)
    leader = await state.transition_to_leader(0, accumulator(1))
    assert state.is_leader and leader.granting_voters == {1, 3}
    assert store.writes[-1] == ElectionState.with_elected_leader(1, 1, None, {1, 2, 3})
    state.transition_to_resigned([ReplicaKey(3)])
    assert state.is_resigned and state.resigned_state().unacked_voters == {2, 3}


async def test_a_lost_prevote_returns_to_unattached_with_a_new_timer() -> None:
    state, _ = await started(None)
    state.transition_to_prospective()
    state.prospective_state().record_rejected_vote(2)
    state.prospective_state().record_rejected_vote(3)
    await state.transition_to_unattached(0)
    assert state.is_unattached and state.unattached_state().election_timeout_ms >= 1000


async def test_observers_never_elect() -> None:
    state, _ = await started(None, local_id=9)
    assert state.is_observer
    with pytest.raises(RuntimeError, match="not one of the voters"):
        state.transition_to_prospective()


async def test_epochs_never_go_back() -> None:
    state, _ = await started(None)
    await state.transition_to_follower(5, 2, VOTERS.listeners(2))
    with pytest.raises(RuntimeError, match="larger"):
        await state.transition_to_follower(4, 3, VOTERS.listeners(3))
    with pytest.raises(RuntimeError, match="Cannot transition to Unattached"):
        await state.transition_to_unattached(5)


def accumulator(epoch: int) -> BatchAccumulator[bytes]:
    return BatchAccumulator(epoch, 0, 25, 1 << 20, 10, MockTime(), IdentitySerde())
