"""The election state machine of one replica (Kafka's ``QuorumState``): which state it is
in, which transitions are allowed, and that every change of epoch, vote or leader is
persisted in ``quorum-state`` before it takes effect.

    Unattached   -> Unattached (higher epoch, or a vote granted), Prospective (election
                    timeout), Follower (a leader of this or a higher epoch)
    Prospective  -> Unattached (higher epoch; or lost, no known leader), Candidate
                    (majority of PreVotes), Follower (a leader; or lost, leader known)
    Candidate    -> Unattached (higher epoch), Prospective (lost or timed out), Leader
    Leader       -> Unattached (higher epoch), Resigned (shutdown, resign, check quorum),
                    Follower (a leader of a higher epoch)
    Follower     -> Unattached (higher epoch), Prospective (fetch timeout), Follower
                    (a leader of a higher epoch, or more of this leader's endpoints)
    Resigned     -> Unattached (higher epoch, or election timeout), Follower

Observers only move between Unattached and Follower. Prospective and Resigned are soft
(held in memory only); every other transition is durable. Event-loop only; the durable
transitions await the store's fsync.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

from tiercel.server.raft.batch_accumulator import BatchAccumulator
from tiercel.server.raft.candidate_state import CandidateState
from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.endpoints import Endpoints
from tiercel.server.raft.epoch_state import EpochState
from tiercel.server.raft.follower_state import FollowerState
from tiercel.server.raft.leader_and_epoch import LeaderAndEpoch
from tiercel.server.raft.leader_state import LeaderState
from tiercel.server.raft.nominee_state import NomineeState
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.prospective_state import ProspectiveState
from tiercel.server.raft.quorum_state_store import QuorumStateStore
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.resigned_state import ResignedState
from tiercel.server.raft.timer import Time
from tiercel.server.raft.unattached_state import UnattachedState
from tiercel.server.raft.voter_set import VoterSet
from tiercel.storage.log_values import LogOffsetMetadata

__all__ = ["QuorumState"]

T = TypeVar("T")
S = TypeVar("S", bound=EpochState)
_log: Final = logging.getLogger("tiercel.raft")


class QuorumState:
    """Invariant: epochs never decrease; a standard vote is persisted before it is
    granted, and kept for the rest of the epoch."""

    def __init__(
        self,
        local_id: int | None,
        local_directory_id: uuid.UUID,
        latest_voter_set: Callable[[], VoterSet],
        latest_kraft_version: Callable[[], int],
        local_listeners: Endpoints,
        election_timeout_ms: int,
        fetch_timeout_ms: int,
        store: QuorumStateStore,
        time: Time,
        rng: random.Random,
    ) -> None:
        self.local_id = local_id
        self.local_directory_id = local_directory_id
        self._latest_voter_set = latest_voter_set
        self._latest_kraft_version = latest_kraft_version
        self.local_listeners = local_listeners
        self._election_timeout_ms = election_timeout_ms
        self._fetch_timeout_ms = fetch_timeout_ms
        self._store = store
        self._time = time
        self._random = rng
        self._state: EpochState | None = None

    async def initialize(self, log_end: OffsetAndEpoch) -> None:
        """Start in the state persisted at shutdown (Kafka's QuorumState.initialize); an
        election held meanwhile is learnt from the first Vote or BeginQuorumEpoch."""
        election = await self._store.read_election_state()
        if election is None:
            election = ElectionState.with_unknown_leader(0, self.voters.voter_ids)
        voters = self.voters.voter_ids
        initial: EpochState
        if election.has_voted and self.local_id is None:
            raise RuntimeError(
                f"Initialized quorum state ({election}) with a voted candidate but without a "
                "local id"
            )
        if election.epoch < log_end.epoch:
            _log.warning(
                "epoch in quorum-state (%d) is smaller than the last written epoch %d",
                election.epoch,
                log_end.epoch,
            )
            initial = self._unattached(log_end.epoch, None, None, self.random_election_timeout_ms())
        elif self.local_id is not None and election.is_leader(self.local_id):
            # A leader restarts resigned in its epoch: it cannot vote in it again, and an
            # (offset, epoch) it wrote but lost unflushed is never written differently.
            initial = ResignedState(
                self._time,
                self.local_id,
                election.epoch,
                voters,
                self.random_election_timeout_ms(),
                [],
                self.local_listeners,
            )
        elif self.local_id is not None and election.is_voted_candidate(self.local_replica_key):
            initial = CandidateState(
                self._time,
                self.local_replica_key,
                election.epoch,
                self.voters,
                None,
                self.random_election_timeout_ms(),
            )
        elif (
            election.leader_id is not None
            and not self.voters.listeners(election.leader_id).is_empty
        ):
            initial = FollowerState(
                self._time,
                election.epoch,
                election.leader_id,
                self.voters.listeners(election.leader_id),
                election.voted_key,
                voters,
                None,
                self._fetch_timeout_ms,
            )
        else:
            # Without the leader's endpoints it cannot fetch: unattached, until a Fetch
            # answer or a BeginQuorumEpoch names them.
            initial = self._unattached(
                election.epoch,
                election.leader_id,
                election.voted_key,
                self.random_election_timeout_ms(),
            )
        await self._durable_transition_to(initial)

    # -- identity ------------------------------------------------------------------------

    @property
    def voters(self) -> VoterSet:
        """The voter set of the log's last VotersRecord, or the static one (Kafka's
        QuorumState reads it through its latestVoterSet supplier): new states take the
        set current when they begin."""
        return self._latest_voter_set()

    @property
    def local_replica_key(self) -> ReplicaKey:
        if self.local_id is None:
            raise RuntimeError("Required local id is not present")
        return ReplicaKey(self.local_id, self.local_directory_id)

    @property
    def local_id_or_sentinel(self) -> int:
        return -1 if self.local_id is None else self.local_id

    @property
    def is_voter(self) -> bool:
        return self.local_id is not None and self.voters.is_voter(self.local_replica_key)

    @property
    def is_observer(self) -> bool:
        return not self.is_voter

    @property
    def is_only_voter(self) -> bool:
        return self.local_id is not None and self.voters.is_only_voter(self.local_replica_key)

    # -- the current state ---------------------------------------------------------------

    @property
    def state(self) -> EpochState:
        if self._state is None:
            raise RuntimeError("QuorumState is not initialized")
        return self._state

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        return self.state.election.leader_id

    @property
    def leader_id_or_sentinel(self) -> int:
        leader = self.leader_id
        return -1 if leader is None else leader

    @property
    def voted_key(self) -> ReplicaKey | None:
        return self.state.election.voted_key

    @property
    def has_leader(self) -> bool:
        return self.leader_id is not None

    @property
    def has_remote_leader(self) -> bool:
        return self.has_leader and self.leader_id != self.local_id_or_sentinel

    @property
    def leader_endpoints(self) -> Endpoints:
        return self.state.leader_endpoints

    @property
    def high_watermark(self) -> LogOffsetMetadata | None:
        return self.state.high_watermark

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        election = self.state.election
        return LeaderAndEpoch(election.leader_id, election.epoch)

    def can_grant_vote(
        self, replica_key: ReplicaKey, is_log_up_to_date: bool, is_pre_vote: bool
    ) -> bool:
        return self.state.can_grant_vote(replica_key, is_log_up_to_date, is_pre_vote)

    def _as(self, kind: type[S]) -> S | None:
        state = self._state
        return state if isinstance(state, kind) else None

    def _or_throw(self, kind: type[S]) -> S:
        state = self._as(kind)
        if state is None:
            raise RuntimeError(
                f"Expected to be {kind.name}, but the current state is {self._state}"
            )
        return state

    @property
    def is_leader(self) -> bool:
        return self._as(LeaderState) is not None

    @property
    def is_candidate(self) -> bool:
        return self._as(CandidateState) is not None

    @property
    def is_prospective(self) -> bool:
        return self._as(ProspectiveState) is not None

    @property
    def is_follower(self) -> bool:
        return self._as(FollowerState) is not None

    @property
    def is_unattached(self) -> bool:
        return self._as(UnattachedState) is not None

    @property
    def is_resigned(self) -> bool:
        return self._as(ResignedState) is not None

    @property
    def is_nominee(self) -> bool:
        return isinstance(self._state, NomineeState)

    @property
    def is_unattached_not_voted(self) -> bool:
        state = self._as(UnattachedState)
        return state is not None and state.voted_key is None

    @property
    def is_prospective_not_voted(self) -> bool:
        state = self._as(ProspectiveState)
        return state is not None and state.voted_key is None

    def leader_state(self) -> LeaderState[T]:
        return self._or_throw(LeaderState)

    def maybe_leader_state(self) -> LeaderState[T] | None:
        return self._as(LeaderState)

    def follower_state(self) -> FollowerState:
        return self._or_throw(FollowerState)

    def candidate_state(self) -> CandidateState:
        return self._or_throw(CandidateState)

    def prospective_state(self) -> ProspectiveState:
        return self._or_throw(ProspectiveState)

    def nominee_state(self) -> NomineeState:
        state = self._state
        if not isinstance(state, NomineeState):
            raise RuntimeError(f"Expected to be Prospective or Candidate, but the state is {state}")
        return state

    def unattached_state(self) -> UnattachedState:
        return self._or_throw(UnattachedState)

    def resigned_state(self) -> ResignedState:
        return self._or_throw(ResignedState)

    # -- transitions ---------------------------------------------------------------------

    def transition_to_resigned(self, preferred_successors: Sequence[ReplicaKey]) -> None:
        if not self.is_leader:
            raise RuntimeError(f"Invalid transition to Resigned state from {self._state}")
        self._memory_transition_to(
            ResignedState(
                self._time,
                self.local_replica_key.id,
                self.epoch,
                self.voters.voter_ids,
                self.random_election_timeout_ms(),
                preferred_successors,
                self.local_listeners,
            )
        )

    async def transition_to_unattached(self, epoch: int, leader_id: int | None = None) -> None:
        """A higher epoch (or this one, from Prospective, keeping the vote); the election
        timer keeps running where it was unless a new election must wait its own time."""
        current = self.epoch
        if epoch < current or (epoch == current and not self.is_prospective):
            raise RuntimeError(
                f"Cannot transition to Unattached with epoch {epoch} from {self._state}"
            )
        now = self._time.milliseconds()
        state = self.state
        if self.is_observer:
            timeout = 2**62
        elif isinstance(state, ProspectiveState) and state.epoch_election.is_vote_rejected:
            timeout = self.random_election_timeout_ms()
        elif isinstance(state, UnattachedState | NomineeState | ResignedState):
            timeout = state.remaining_election_time_ms(now)
        else:
            timeout = self.random_election_timeout_ms()
        voted_key = self.voted_key if epoch == current else None
        await self._durable_transition_to(self._unattached(epoch, leader_id, voted_key, timeout))

    async def unattached_add_voted_state(self, epoch: int, candidate_key: ReplicaKey) -> None:
        """Vote as Unattached in this epoch; the timer restarts, the candidate having as
        good a chance as this replica."""
        self._check_vote(epoch, candidate_key, self.is_unattached_not_voted)
        state = self.unattached_state()
        await self._durable_transition_to(
            self._unattached(
                epoch, state.leader_id, candidate_key, self.random_election_timeout_ms()
            )
        )

    async def prospective_add_voted_state(self, epoch: int, candidate_key: ReplicaKey) -> None:
        self._check_vote(epoch, candidate_key, self.is_prospective_not_voted)
        state = self.prospective_state()
        await self._durable_transition_to(
            ProspectiveState(
                self._time,
                self.local_replica_key.id,
                epoch,
                state.leader_id,
                state.leader_endpoints,
                candidate_key,
                self.voters,
                state.high_watermark,
                self.random_election_timeout_ms(),
            )
        )

    def _check_vote(self, epoch: int, candidate_key: ReplicaKey, allowed: bool) -> None:
        if self.local_id is None:
            raise RuntimeError("Cannot add voted state without a replica id")
        if candidate_key.id == self.local_id:
            raise RuntimeError(
                f"Cannot add voted key ({candidate_key}) to current state ({self._state}) in "
                f"epoch {epoch} since it matches the local broker.id"
            )
        if epoch != self.epoch or not allowed:
            raise RuntimeError(
                f"Cannot add voted key ({candidate_key}) to current state ({self._state}) in "
                f"epoch {epoch}"
            )

    async def transition_to_follower(
        self, epoch: int, leader_id: int, endpoints: Endpoints
    ) -> None:
        current = self.epoch
        if endpoints.is_empty:
            raise ValueError(
                f"Cannot transition to Follower with leader {leader_id} and epoch {epoch} "
                "without a leader endpoint"
            )
        if leader_id == self.local_id:
            raise RuntimeError(
                f"Cannot transition to Follower with leader {leader_id} and epoch {epoch} since "
                f"it matches the local node.id {self.local_id}"
            )
        if epoch < current:
            raise RuntimeError(
                f"Cannot transition to Follower with leader {leader_id} and epoch {epoch} since "
                f"the current epoch {current} is larger"
            )
        if epoch == current and (
            self.is_leader
            or (self.is_follower and len(self.state.leader_endpoints) >= len(endpoints))
        ):
            raise RuntimeError(
                f"Cannot transition to Follower with leader {leader_id}, epoch {epoch} and "
                f"endpoints {endpoints} from state {self._state}"
            )
        # Within an epoch the vote stays: a replica never votes twice in one epoch.
        voted_key = self.voted_key if epoch == current else None
        await self._durable_transition_to(
            FollowerState(
                self._time,
                epoch,
                leader_id,
                endpoints,
                voted_key,
                self.voters.voter_ids,
                self.state.high_watermark,
                self._fetch_timeout_ms,
            )
        )

    def transition_to_prospective(self) -> None:
        """A fetch or election timeout, or a lost election: ask for PreVotes in this epoch
        (soft: nothing persisted changes)."""
        if self.is_observer:
            raise RuntimeError(
                f"Cannot transition to Prospective since the local id ({self.local_id}) is not "
                f"one of the voters {sorted(self.voters.voter_ids)}"
            )
        if self.is_leader or self.is_prospective:
            raise RuntimeError(f"Cannot transition to Prospective from {self._state}")
        self._memory_transition_to(
            ProspectiveState(
                self._time,
                self.local_replica_key.id,
                self.epoch,
                self.leader_id,
                self.state.leader_endpoints,
                self.voted_key,
                self.voters,
                self.state.high_watermark,
                self.random_election_timeout_ms(),
            )
        )

    async def transition_to_candidate(self) -> None:
        """Only from Prospective: bump the epoch and vote for itself, durably."""
        if self.is_observer:
            raise RuntimeError(
                f"Cannot transition to Candidate since the local id ({self.local_id}) is not "
                f"one of the voters {sorted(self.voters.voter_ids)}"
            )
        if not self.is_prospective:
            raise RuntimeError(f"Cannot transition to Candidate from {self._state}")
        await self._durable_transition_to(
            CandidateState(
                self._time,
                self.local_replica_key,
                self.epoch + 1,
                self.voters,
                self.state.high_watermark,
                self.random_election_timeout_ms(),
            )
        )

    async def transition_to_leader(
        self, epoch_start_offset: int, accumulator: BatchAccumulator[T]
    ) -> LeaderState[T]:
        """The leader does not keep the high watermark it knew: the HW exposed by a leader
        must only grow, and only a majority at this epoch's start proves where it is."""
        if self.is_observer:
            raise RuntimeError("Cannot transition to Leader as an observer")
        candidate = self.candidate_state()
        if not candidate.epoch_election.is_vote_granted:
            raise RuntimeError("Cannot become leader without majority votes granted")
        state = LeaderState(
            self._time,
            self.local_replica_key,
            self.epoch,
            epoch_start_offset,
            self.voters,
            candidate.epoch_election.granting_voters,
            accumulator,
            self.local_listeners,
            self._fetch_timeout_ms,
        )
        await self._durable_transition_to(state)
        return state

    def _unattached(
        self, epoch: int, leader_id: int | None, voted_key: ReplicaKey | None, timeout_ms: int
    ) -> UnattachedState:
        return UnattachedState(
            self._time,
            epoch,
            leader_id,
            voted_key,
            self.voters.voter_ids,
            None if self._state is None else self._state.high_watermark,
            timeout_ms,
        )

    async def _durable_transition_to(self, new_state: EpochState) -> None:
        _log.info("attempting durable transition to %s from %s", new_state, self._state)
        # quorum-state's data_version follows kraft.version (Kafka's
        # QuorumState.durableTransitionTo writes with latestKraftVersion).
        await self._store.write_election_state(new_state.election, self._latest_kraft_version())
        self._memory_transition_to(new_state)

    def _memory_transition_to(self, new_state: EpochState) -> None:
        old = self._state
        if old is not None:
            old.close()
        self._state = new_state
        _log.info("completed transition to %s from %s", new_state, old)

    def random_election_timeout_ms(self) -> int:
        """``controller.quorum.election.timeout.ms`` plus up to as much again, at random."""
        timeout = self._election_timeout_ms
        return 0 if timeout == 0 else timeout + self._random.randrange(timeout)
