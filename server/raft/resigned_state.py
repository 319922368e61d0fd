"""Resigned: a leader that stepped down, gracefully or at restart (Kafka's
``ResignedState``). It tells the other voters with EndQuorumEpoch (preferred successors
first) until they acknowledge, and never votes in its epoch again."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.endpoints import Endpoints
from tiercel.server.raft.epoch_state import EpochState
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.timer import Time, Timer

__all__ = ["ResignedState"]


class ResignedState(EpochState):
    """Soft: a leader restarts into it, so it need not be persisted."""

    name = "Resigned"

    def __init__(
        self,
        time: Time,
        local_id: int,
        epoch: int,
        voters: Iterable[int],
        election_timeout_ms: int,
        preferred_successors: Sequence[ReplicaKey],
        endpoints: Endpoints,
    ) -> None:
        super().__init__(epoch)
        self.local_id = local_id
        self._voters = frozenset(voters)
        self.unacked_voters = set(self._voters - {local_id})
        self.election_timeout_ms = election_timeout_ms
        self._election_timer = Timer(time, election_timeout_ms)
        self.preferred_successors = list(preferred_successors)
        self._endpoints = endpoints

    @property
    def election(self) -> ElectionState:
        return ElectionState.with_elected_leader(self.epoch, self.local_id, None, self._voters)

    @property
    def leader_endpoints(self) -> Endpoints:
        return self._endpoints

    def acknowledge_resignation(self, voter_id: int) -> None:
        if voter_id not in self._voters:
            raise ValueError(
                f"Attempt to acknowledge delivery of `EndQuorumEpoch` by a non-voter {voter_id}"
            )
        self.unacked_voters.discard(voter_id)

    def has_election_timeout_expired(self, now: int) -> bool:
        self._election_timer.update(now)
        return self._election_timer.is_expired

    def remaining_election_time_ms(self, now: int) -> int:
        self._election_timer.update(now)
        return self._election_timer.remaining_ms

    def can_grant_vote(
        self, replica_key: ReplicaKey, is_log_up_to_date: bool, is_pre_vote: bool
    ) -> bool:
        return is_pre_vote and is_log_up_to_date
