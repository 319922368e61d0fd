"""Candidate: a voter that bumped the epoch, voted for itself and asks for votes (Kafka's
``CandidateState``). A majority makes it leader; losing or timing out sends it back to
Prospective (Kafka 4.0), whose PreVotes precede any further epoch bump."""

from __future__ import annotations

from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.nominee_state import NomineeState
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.timer import Time
from tiercel.server.raft.voter_set import VoterSet
from tiercel.storage.log_values import LogOffsetMetadata

__all__ = ["CandidateState"]


class CandidateState(NomineeState):
    """Invariant: the local replica is a voter; its vote for itself is persisted."""

    name = "Candidate"

    def __init__(
        self,
        time: Time,
        local_key: ReplicaKey,
        epoch: int,
        voters: VoterSet,
        high_watermark: LogOffsetMetadata | None,
        election_timeout_ms: int,
    ) -> None:
        if not voters.is_voter(local_key):
            raise ValueError(f"Local replica {local_key} must be in the set of voters {voters}")
        super().__init__(time, local_key.id, epoch, voters, election_timeout_ms)
        self.local_key = local_key
        self._high_watermark = high_watermark

    @property
    def election(self) -> ElectionState:
        return ElectionState.with_voted_candidate(self.epoch, self.local_key, self.voters.voter_ids)

    @property
    def high_watermark(self) -> LogOffsetMetadata | None:
        return self._high_watermark

    def can_grant_vote(
        self, replica_key: ReplicaKey, is_log_up_to_date: bool, is_pre_vote: bool
    ) -> bool:
        # A standard vote is refused even to ourselves: our own vote is implicit.
        return is_pre_vote and is_log_up_to_date
