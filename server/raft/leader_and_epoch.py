"""The current leader (if known) and epoch, as listeners are told of them (Kafka's
``LeaderAndEpoch``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LeaderAndEpoch"]


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """``leader_id`` None: no leader known in ``epoch`` (yet).

    Invariant: a value; safe anywhere."""

    leader_id: int | None
    epoch: int

    def is_leader(self, node_id: int) -> bool:
        return self.leader_id == node_id


UNKNOWN_LEADER_AND_EPOCH = LeaderAndEpoch(None, 0)
