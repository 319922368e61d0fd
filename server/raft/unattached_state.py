"""Unattached: an epoch whose leader this replica does not follow (yet) (Kafka's
``UnattachedState``). A voter waits out its election timeout here, maybe after voting
for a candidate; an observer stays until it finds the leader."""

from __future__ import annotations

from collections.abc import Iterable

from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.epoch_state import EpochState, unattached_or_prospective_can_grant_vote
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.timer import Time, Timer
from tiercel.storage.log_values import LogOffsetMetadata

__all__ = ["UnattachedState"]


class UnattachedState(EpochState):
    """``leader_id``: the leader of this epoch when known without its endpoints."""

    name = "Unattached"

    def __init__(
        self,
        time: Time,
        epoch: int,
        leader_id: int | None,
        voted_key: ReplicaKey | None,
        voters: Iterable[int],
        high_watermark: LogOffsetMetadata | None,
        election_timeout_ms: int,
    ) -> None:
        super().__init__(epoch)
        self.leader_id = leader_id
        self.voted_key = voted_key
        self._voters = frozenset(voters)
        self._high_watermark = high_watermark
        self.election_timeout_ms = election_timeout_ms
        self._election_timer = Timer(time, election_timeout_ms)

    @property
    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self.leader_id, self.voted_key, self._voters)

    @property
    def high_watermark(self) -> LogOffsetMetadata | None:
        return self._high_watermark

    def has_election_timeout_expired(self, now: int) -> bool:
        self._election_timer.update(now)
        return self._election_timer.is_expired

    def remaining_election_time_ms(self, now: int) -> int:
        self._election_timer.update(now)
        return self._election_timer.remaining_ms

    def can_grant_vote(
        self, replica_key: ReplicaKey, is_log_up_to_date: bool, is_pre_vote: bool
    ) -> bool:
        return unattached_or_prospective_can_grant_vote(
            self.leader_id, self.voted_key, self.epoch, replica_key, is_log_up_to_date, is_pre_vote
        )
