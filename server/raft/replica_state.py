"""What a leader knows of one replica's progress (Kafka's ``LeaderState.ReplicaState``):
its log end offset as its fetches report it, when it last fetched and when it was last
caught up (DescribeQuorum's LastFetchTimestamp and LastCaughtUpTimestamp)."""

from __future__ import annotations

from tiercel.server.raft.endpoints import Endpoints
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.storage.log_values import LogOffsetMetadata

__all__ = ["ReplicaState"]


class ReplicaState:
    """Event-loop only; owned by the leader's state."""

    __slots__ = (
        "end_offset",
        "has_acknowledged_leader",
        "last_caught_up_timestamp",
        "last_fetch_leader_log_end_offset",
        "last_fetch_timestamp",
        "listeners",
        "replica_key",
    )

    def __init__(
        self, replica_key: ReplicaKey, has_acknowledged_leader: bool, listeners: Endpoints
    ) -> None:
        self.replica_key = replica_key
        self.listeners = listeners
        self.end_offset: LogOffsetMetadata | None = None
        self.last_fetch_timestamp = -1
        self.last_fetch_leader_log_end_offset = -1
        self.last_caught_up_timestamp = -1
        self.has_acknowledged_leader = has_acknowledged_leader

    def matches_key(self, replica_key: ReplicaKey) -> bool:
        return self.replica_key.matches(replica_key)

    def update_leader_end_offset(self, end_offset: LogOffsetMetadata) -> None:
        self.end_offset = end_offset

    def update_follower_state(
        self, now: int, fetch_offset: LogOffsetMetadata, leader_end_offset: LogOffsetMetadata | None
    ) -> None:
        """A fetch at ``fetch_offset``: the replica has everything below it. Caught up
        means it reached the leader's end as of this fetch, or as of its previous fetch
        (then it was caught up at that earlier time)."""
        if leader_end_offset is not None:
            if fetch_offset.message_offset >= leader_end_offset.message_offset:
                self.last_caught_up_timestamp = max(self.last_caught_up_timestamp, now)
            elif (
                self.last_fetch_leader_log_end_offset > 0
                and fetch_offset.message_offset >= self.last_fetch_leader_log_end_offset
            ):
                self.last_caught_up_timestamp = max(
                    self.last_caught_up_timestamp, self.last_fetch_timestamp
                )
            self.last_fetch_leader_log_end_offset = leader_end_offset.message_offset
        self.last_fetch_timestamp = max(self.last_fetch_timestamp, now)
        self.end_offset = fetch_offset
        self.has_acknowledged_leader = True

    def sort_key(self) -> tuple[int, int, int]:
        """Descending end offset, unknown last, then the replica key (Kafka's
        ReplicaState.compareTo)."""
        offset = -1 if self.end_offset is None else self.end_offset.message_offset
        key_id, directory = self.replica_key.sort_key()
        return (-offset, key_id, directory)

    def __repr__(self) -> str:
        return (
            f"ReplicaState(replicaKey={self.replica_key}, endOffset={self.end_offset}, "
            f"lastFetchTimestamp={self.last_fetch_timestamp}, "
            f"lastCaughtUpTimestamp={self.last_caught_up_timestamp}, "
            f"hasAcknowledgedLeader={self.has_acknowledged_leader})"
        )
