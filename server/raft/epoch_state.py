"""What every state of the election state machine answers (Kafka's ``EpochState``)."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Final

from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.endpoints import Endpoints
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.storage.log_values import LogOffsetMetadata

__all__ = ["EpochState", "unattached_or_prospective_can_grant_vote"]

_log: Final = logging.getLogger("tiercel.raft")


class EpochState(ABC):
    """One state in one epoch. Event-loop only; replaced whole on every transition."""

    name: str = ""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    @abstractmethod
    def election(self) -> ElectionState:
        """What this state persists in quorum-state."""

    @property
    def leader_endpoints(self) -> Endpoints:
        """The leader's listeners, empty when unknown."""
        return Endpoints()

    @property
    def high_watermark(self) -> LogOffsetMetadata | None:
        return None

    @abstractmethod
    def can_grant_vote(
        self, replica_key: ReplicaKey, is_log_up_to_date: bool, is_pre_vote: bool
    ) -> bool:
        """Whether to grant ``replica_key``'s (pre-)vote; the caller persists a standard
        vote it grants before answering (Kafka's EpochState.canGrantVote)."""

    def close(self) -> None:  # noqa: B027 - most states hold nothing to release
        """Release what the state holds (a leader's accumulator, a follower's snapshot
        download) when the next state replaces it."""

    def __repr__(self) -> str:
        return f"{self.name}(epoch={self.epoch}, election={self.election})"


def unattached_or_prospective_can_grant_vote(
    leader_id: int | None,
    voted_key: ReplicaKey | None,
    epoch: int,
    replica_key: ReplicaKey,
    is_log_up_to_date: bool,
    is_pre_vote: bool,
) -> bool:
    """Kafka's QuorumState.unattachedOrProspectiveCanGrantVote: a PreVote needs only an
    up-to-date log; a standard vote also needs no vote for another replica and no known
    leader in this epoch (a replica votes at most once per epoch)."""
    if is_pre_vote:
        return is_log_up_to_date
    if voted_key is not None:
        if voted_key.id == replica_key.id:
            return (
                voted_key.directory_id is None or voted_key.directory_id == replica_key.directory_id
            )
        _log.debug("rejecting vote of %s in epoch %d: voted for %s", replica_key, epoch, voted_key)
        return False
    if leader_id is not None:
        _log.debug("rejecting vote of %s in epoch %d: leader %d", replica_key, epoch, leader_id)
        return False
    return is_log_up_to_date
