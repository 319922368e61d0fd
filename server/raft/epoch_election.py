"""The votes a nominee (prospective or candidate) has collected in one election (Kafka's
``EpochElection``)."""

from __future__ import annotations

import enum
from collections.abc import Iterable

from tiercel.server.raft.replica_key import ReplicaKey

__all__ = ["EpochElection"]


class _Vote(enum.Enum):
    UNRECORDED = "unrecorded"
    GRANTED = "granted"
    REJECTED = "rejected"


class EpochElection:
    """Invariant: one entry per voter, keyed by id. Event-loop only."""

    def __init__(self, voters: Iterable[ReplicaKey]) -> None:
        self._voters = {key.id: key for key in voters}
        self._votes = dict.fromkeys(self._voters, _Vote.UNRECORDED)

    def record_vote(self, voter_id: int, granted: bool) -> bool:
        """Record a vote; True if the voter had not voted yet. ValueError for a non-voter."""
        if voter_id not in self._votes:
            raise ValueError(f"Attempt to access voter state of non-voter {voter_id}")
        was_unrecorded = self._votes[voter_id] is _Vote.UNRECORDED
        self._votes[voter_id] = _Vote.GRANTED if granted else _Vote.REJECTED
        return was_unrecorded

    @property
    def voter_ids(self) -> frozenset[int]:
        return frozenset(self._votes)

    def _count(self, vote: _Vote) -> int:
        return sum(1 for v in self._votes.values() if v is vote)

    @property
    def majority_size(self) -> int:
        return len(self._votes) // 2 + 1

    @property
    def is_vote_granted(self) -> bool:
        return self._count(_Vote.GRANTED) >= self.majority_size

    @property
    def is_vote_rejected(self) -> bool:
        """No majority can be reached any more."""
        return self._count(_Vote.GRANTED) + self._count(_Vote.UNRECORDED) < self.majority_size

    @property
    def unrecorded_voters(self) -> list[ReplicaKey]:
        return [self._voters[v] for v, vote in self._votes.items() if vote is _Vote.UNRECORDED]

    @property
    def granting_voters(self) -> frozenset[int]:
        return frozenset(v for v, vote in self._votes.items() if vote is _Vote.GRANTED)

    @property
    def rejecting_voters(self) -> frozenset[int]:
        return frozenset(v for v, vote in self._votes.items() if vote is _Vote.REJECTED)

    def __repr__(self) -> str:
        votes = ", ".join(f"{v}:{vote.value}" for v, vote in sorted(self._votes.items()))
        return f"EpochElection({votes})"
