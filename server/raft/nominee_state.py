"""What a replica running an election has (Kafka's ``NomineeState``): the votes of the
voters and an election timer. Prospective (PreVote, KIP-996) and Candidate are nominees."""

from __future__ import annotations

from tiercel.server.raft.epoch_election import EpochElection
from tiercel.server.raft.epoch_state import EpochState
from tiercel.server.raft.timer import Time, Timer
from tiercel.server.raft.voter_set import VoterSet

__all__ = ["NomineeState"]


class NomineeState(EpochState):
    """Invariant: the local voter's own vote is granted from the start."""

    def __init__(
        self,
        time: Time,
        local_id: int,
        epoch: int,
        voters: VoterSet,
        election_timeout_ms: int,
    ) -> None:
        super().__init__(epoch)
        self.local_id = local_id
        self.voters = voters
        self.epoch_election = EpochElection(voters.voter_keys)
        self.epoch_election.record_vote(local_id, True)
        self.election_timeout_ms = election_timeout_ms
        self._election_timer = Timer(time, election_timeout_ms)

    def record_granted_vote(self, voter_id: int) -> bool:
        return self.epoch_election.record_vote(voter_id, True)

    def record_rejected_vote(self, voter_id: int) -> bool:
        if voter_id == self.local_id:
            raise ValueError("Attempted to reject vote from ourselves")
        return self.epoch_election.record_vote(voter_id, False)

    def has_election_timeout_expired(self, now: int) -> bool:
        self._election_timer.update(now)
        return self._election_timer.is_expired

    def remaining_election_time_ms(self, now: int) -> int:
        self._election_timer.update(now)
        return self._election_timer.remaining_ms
