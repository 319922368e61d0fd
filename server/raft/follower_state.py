"""Follower: the leader of this epoch is known; fetch from it (Kafka's ``FollowerState``).

A voter whose fetches stop succeeding for ``controller.quorum.fetch.timeout.ms`` becomes
Prospective. It grants a PreVote only until its first successful fetch in this epoch:
after that the leader is alive as far as it knows (KIP-996).
"""

from __future__ import annotations

from collections.abc import Iterable

from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.endpoints import Endpoints, Node
from tiercel.server.raft.epoch_state import EpochState
from tiercel.server.raft.raw_snapshot import RawSnapshotWriter
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.timer import Time, Timer
from tiercel.storage.log_values import LogOffsetMetadata

__all__ = ["FollowerState"]


class FollowerState(EpochState):
    """Invariants: the high watermark only grows; while ``fetching_snapshot`` is set the
    follower sends FetchSnapshot instead of Fetch. Event-loop only."""

    name = "Follower"

    def __init__(
        self,
        time: Time,
        epoch: int,
        leader_id: int,
        leader_endpoints: Endpoints,
        voted_key: ReplicaKey | None,
        voters: Iterable[int],
        high_watermark: LogOffsetMetadata | None,
        fetch_timeout_ms: int,
    ) -> None:
        super().__init__(epoch)
        self.leader_id = leader_id
        self._leader_endpoints = leader_endpoints
        self.voted_key = voted_key
        self._voters = frozenset(voters)
        self._high_watermark = high_watermark
        self._fetch_timeout_ms = fetch_timeout_ms
        self._fetch_timer = Timer(time, fetch_timeout_ms)
        self.has_fetched_from_leader = False
        self.fetching_snapshot: RawSnapshotWriter | None = None

    @property
    def election(self) -> ElectionState:
        return ElectionState.with_elected_leader(
            self.epoch, self.leader_id, self.voted_key, self._voters
        )

    @property
    def leader_endpoints(self) -> Endpoints:
        return self._leader_endpoints

    @property
    def high_watermark(self) -> LogOffsetMetadata | None:
        return self._high_watermark

    def leader_node(self, listener_name: str) -> Node:
        address = self._leader_endpoints.address(listener_name)
        if address is None:
            raise ValueError(
                f"Unknown endpoint for leader {self.leader_id} and listener {listener_name}, "
                f"known endpoints are {self._leader_endpoints}"
            )
        return Node(self.leader_id, address.host, address.port)

    def remaining_fetch_time_ms(self, now: int) -> int:
        self._fetch_timer.update(now)
        return self._fetch_timer.remaining_ms

    def has_fetch_timeout_expired(self, now: int) -> bool:
        self._fetch_timer.update(now)
        return self._fetch_timer.is_expired

    def reset_fetch_timeout_for_successful_fetch(self, now: int) -> None:
        self._fetch_timer.update(now)
        self._fetch_timer.reset(self._fetch_timeout_ms)
        self.has_fetched_from_leader = True

    def override_fetch_timeout(self, now: int, timeout_ms: int) -> None:
        """EndQuorumEpoch: start the election sooner, the best successor first."""
        self._fetch_timer.update(now)
        self._fetch_timer.reset(timeout_ms)

    def update_high_watermark(self, new_high_watermark: int) -> bool:
        """Take the leader's HW (already capped at the log end); True if it moved.
        ValueError on a non-monotonic update."""
        if new_high_watermark < 0:
            raise ValueError(f"Illegal negative ({new_high_watermark}) high watermark update")
        current = self._high_watermark
        if current is not None:
            if current.message_offset > new_high_watermark:
                raise ValueError(
                    f"Non-monotonic update of high watermark from {current.message_offset} to "
                    f"{new_high_watermark}"
                )
            if current.message_offset == new_high_watermark:
                return False
        self._high_watermark = LogOffsetMetadata(new_high_watermark)
        return True

    def set_fetching_snapshot(self, snapshot: RawSnapshotWriter | None) -> None:
        if self.fetching_snapshot is not None:
            self.fetching_snapshot.close()
        self.fetching_snapshot = snapshot

    def can_grant_vote(
        self, replica_key: ReplicaKey, is_log_up_to_date: bool, is_pre_vote: bool
    ) -> bool:
        return is_pre_vote and not self.has_fetched_from_leader and is_log_up_to_date

    def close(self) -> None:
        if self.fetching_snapshot is not None:
            self.fetching_snapshot.close()
