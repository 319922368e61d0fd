"""Prospective (KIP-996 PreVote, Kafka 4.0's ``ProspectiveState``): a voter that lost
its leader asks the others, without bumping the epoch, whether they would vote for it.

Lifetime: it sends PreVote requests (Vote with PreVote true, in its current epoch);
a majority of grants makes it a candidate; a leader of this or a later epoch makes it a
follower; a lost or timed-out pre-election makes it a follower of the leader it knew, or
unattached. A PreVote changes no one's state, so a replica cut off from the quorum no
longer disrupts it with ever larger epochs when it comes back.
"""

from __future__ import annotations

from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.endpoints import Endpoints
from tiercel.server.raft.epoch_state import unattached_or_prospective_can_grant_vote
from tiercel.server.raft.nominee_state import NomineeState
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.timer import Time
from tiercel.server.raft.voter_set import VoterSet
from tiercel.storage.log_values import LogOffsetMetadata

__all__ = ["ProspectiveState"]


class ProspectiveState(NomineeState):
    """Soft: never persisted (the election state is that of the previous state)."""

    name = "Prospective"

    def __init__(
        self,
        time: Time,
        local_id: int,
        epoch: int,
        leader_id: int | None,
        leader_endpoints: Endpoints,
        voted_key: ReplicaKey | None,
        voters: VoterSet,
        high_watermark: LogOffsetMetadata | None,
        election_timeout_ms: int,
    ) -> None:
        super().__init__(time, local_id, epoch, voters, election_timeout_ms)
        self.leader_id = leader_id
        self._leader_endpoints = leader_endpoints
        self.voted_key = voted_key
        self._high_watermark = high_watermark

    @property
    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self.leader_id, self.voted_key, self.voters.voter_ids)

    @property
    def leader_endpoints(self) -> Endpoints:
        return self._leader_endpoints

    @property
    def high_watermark(self) -> LogOffsetMetadata | None:
        return self._high_watermark

    def can_grant_vote(
        self, replica_key: ReplicaKey, is_log_up_to_date: bool, is_pre_vote: bool
    ) -> bool:
        return unattached_or_prospective_can_grant_vote(
            self.leader_id, self.voted_key, self.epoch, replica_key, is_log_up_to_date, is_pre_vote
        )
