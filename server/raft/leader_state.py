"""Leader: the replica elected in this epoch (Kafka's ``LeaderState``).

The high watermark is the largest offset a majority of voters (the leader included)
have in their logs, and it moves only once that offset is past the epoch's start
offset: a new leader commits nothing of earlier epochs before an entry of its own epoch
(its LeaderChangeMessage, written first) is committed, Raft's commit rule
(LeaderState.maybeUpdateHighWatermark). It never moves back.

Check quorum: a leader that has not heard a Fetch or FetchSnapshot from a majority of
voters within 1.5 x ``controller.quorum.fetch.timeout.ms`` resigns, so a partitioned
leader stops acting as one. Observers idle for five minutes are forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Final, Generic, TypeVar

from tiercel.server.raft.batch_accumulator import BatchAccumulator
from tiercel.server.raft.control_record import kraft_version_record, leader_change_message
from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.endpoints import Endpoints
from tiercel.server.raft.epoch_state import EpochState
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.replica_state import ReplicaState
from tiercel.server.raft.timer import Time, Timer
from tiercel.server.raft.voter_set import LOCAL_KRAFT_VERSIONS, VoterNode, VoterSet
from tiercel.storage.log_values import LogOffsetMetadata

__all__ = ["LeaderState"]

T = TypeVar("T")
_log: Final = logging.getLogger("tiercel.raft")

OBSERVER_SESSION_TIMEOUT_MS: Final = 300_000
CHECK_QUORUM_TIMEOUT_FACTOR: Final = 1.5


class LeaderState(EpochState, Generic[T]):
    """Invariants: the high watermark, once set, only grows and is past
    ``epoch_start_offset``. Event-loop only."""

    name = "Leader"

    def __init__(
        self,
        time: Time,
        local_key: ReplicaKey,
        epoch: int,
        epoch_start_offset: int,
        voters: VoterSet,
        granting_voters: Iterable[int],
        accumulator: BatchAccumulator[T],
        local_listeners: Endpoints,
        fetch_timeout_ms: int,
    ) -> None:
        super().__init__(epoch)
        self.local_key = local_key
        self.epoch_start_offset = epoch_start_offset
        self.voters = voters
        self.granting_voters = frozenset(granting_voters)
        self.accumulator = accumulator
        self._local_listeners = local_listeners
        self._high_watermark: LogOffsetMetadata | None = None
        self.voter_states = {
            node.voter_key.id: ReplicaState(
                node.voter_key, node.is_voter(local_key), node.listeners
            )
            for node in voters.voters.values()
        }
        self._observer_states: dict[ReplicaKey, ReplicaState] = {}
        self._fetched_voters: set[int] = set()
        self._check_quorum_timeout_ms = int(fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)
        self._check_quorum_timer = Timer(time, self._check_quorum_timeout_ms)
        self._begin_quorum_epoch_timeout_ms = fetch_timeout_ms // 2
        self._begin_quorum_epoch_timer = Timer(time, 0)
        self.resign_requested = False

    @property
    def election(self) -> ElectionState:
        return ElectionState.with_elected_leader(
            self.epoch, self.local_key.id, None, self.voters.voter_ids
        )

    @property
    def leader_endpoints(self) -> Endpoints:
        return self._local_listeners

    @property
    def high_watermark(self) -> LogOffsetMetadata | None:
        return self._high_watermark

    def can_grant_vote(
        self, replica_key: ReplicaKey, is_log_up_to_date: bool, is_pre_vote: bool
    ) -> bool:
        return False

    def append_start_of_epoch_control_records(
        self, now: int, kraft_version: int, voters_offset: int | None
    ) -> None:
        """The LeaderChangeMessage opening the epoch: only an entry of this epoch can
        commit, so it is written at once. With kraft.version 1, a leader whose voter set
        still comes from the bootstrap checkpoint (offset -1), or lists other endpoints
        for it, writes KRaftVersionRecord and VotersRecord in the same batch, so the set
        is in the replicated log (Kafka's LeaderState.appendStartOfEpochControlRecords)."""
        messages: list[Any] = [
            leader_change_message(
                self.local_key.id, list(self.voter_states), sorted(self.granting_voters)
            )
        ]
        if kraft_version >= 1:
            if voters_offset is None:
                raise RuntimeError(
                    f"The kraft.version is {kraft_version} but there is no voter set in the "
                    f"log or checkpoint {self.voters}"
                )
            local_node = VoterNode(self.local_key, self._local_listeners, LOCAL_KRAFT_VERSIONS)
            current = self.voters.voters.get(self.local_key.id)
            if voters_offset == -1 or current != local_node:
                messages.append(kraft_version_record(kraft_version))
                messages.append(self.voters.update_voter(local_node).to_voters_record())
        self.accumulator.append_control_messages(messages, now)

    # -- timers --------------------------------------------------------------------------

    def time_until_begin_quorum_epoch_timer_expires(self, now: int) -> int:
        self._begin_quorum_epoch_timer.update(now)
        return self._begin_quorum_epoch_timer.remaining_ms

    def reset_begin_quorum_epoch_timer(self, now: int) -> None:
        self._begin_quorum_epoch_timer.update(now)
        self._begin_quorum_epoch_timer.reset(self._begin_quorum_epoch_timeout_ms)

    def time_until_check_quorum_expires(self, now: int) -> int:
        """0 once no majority of voters fetched within the check-quorum timeout; a sole
        voter never expires."""
        if len(self.voter_states) == 1:
            return 2**63 - 1
        self._check_quorum_timer.update(now)
        remaining = self._check_quorum_timer.remaining_ms
        if remaining == 0:
            _log.info(
                "no fetch from a majority of voters within %d ms; fetched: %s, voters: %s",
                self._check_quorum_timeout_ms,
                sorted(self._fetched_voters),
                sorted(self.voter_states),
            )
        return remaining

    def update_check_quorum_for_following_voter(self, replica_key: ReplicaKey, now: int) -> None:
        if replica_key.id == self.local_key.id:
            raise ValueError("Received a FETCH/FETCH_SNAPSHOT request from the leader itself.")
        state = self.voter_states.get(replica_key.id)
        if state is not None and state.matches_key(replica_key):
            self._fetched_voters.add(replica_key.id)
        # The leader counts towards the majority without fetching.
        majority = len(self.voter_states) // 2 + 1
        if self.local_key.id in self.voter_states:
            majority -= 1
        if len(self._fetched_voters) >= majority:
            self._fetched_voters.clear()
            self._check_quorum_timer.update(now)
            self._check_quorum_timer.reset(self._check_quorum_timeout_ms)

    # -- replica progress and the high watermark -------------------------------------------

    def update_local_state(self, end_offset: LogOffsetMetadata) -> bool:
        """The leader's own log end; True if the high watermark moved."""
        state = self._replica_state(self.local_key)
        if (
            state.end_offset is not None
            and state.end_offset.message_offset > end_offset.message_offset
        ):
            raise RuntimeError(
                "Detected non-monotonic update of local end offset: "
                f"{state.end_offset.message_offset} -> {end_offset.message_offset}"
            )
        state.update_leader_end_offset(end_offset)
        return self._maybe_update_high_watermark()

    def update_replica_state(
        self, replica_key: ReplicaKey, now: int, fetch_offset: LogOffsetMetadata
    ) -> bool:
        """A replica fetched at ``fetch_offset``; True if the high watermark moved. Fetches
        of negative ids (not replicas) count for nothing."""
        if replica_key.id < 0:
            return False
        if replica_key.id == self.local_key.id:
            raise RuntimeError(f"Remote replica ID {replica_key} matches the local leader ID")
        state = self._replica_state(replica_key)
        if (
            state.end_offset is not None
            and state.end_offset.message_offset > fetch_offset.message_offset
        ):
            _log.warning(
                "non-monotonic fetch offset of %s: %d -> %d",
                replica_key,
                state.end_offset.message_offset,
                fetch_offset.message_offset,
            )
        leader_end = self._replica_state(self.local_key).end_offset
        state.update_follower_state(now, fetch_offset, leader_end)
        self.update_check_quorum_for_following_voter(replica_key, now)
        return self._is_voter(replica_key) and self._maybe_update_high_watermark()

    def _maybe_update_high_watermark(self) -> bool:
        ordered = sorted(self.voter_states.values(), key=ReplicaState.sort_key)
        candidate = ordered[len(self.voter_states) // 2].end_offset
        if candidate is None or candidate.message_offset <= self.epoch_start_offset:
            return False
        current = self._high_watermark
        if current is not None:
            if candidate.message_offset < current.message_offset:
                _log.info(
                    "computed high watermark %d is below the current %d: a voter lost "
                    "committed data? voters: %s",
                    candidate.message_offset,
                    current.message_offset,
                    ordered,
                )
                return False
            if candidate == current or (
                candidate.message_offset == current.message_offset and candidate.message_offset_only
            ):
                return False
        self._high_watermark = candidate
        return True

    def _replica_state(self, replica_key: ReplicaKey) -> ReplicaState:
        state = self.voter_states.get(replica_key.id)
        if state is not None and state.matches_key(replica_key):
            return state
        observer = self._observer_states.get(replica_key)
        if observer is None:
            observer = self._observer_states[replica_key] = ReplicaState(
                replica_key, False, Endpoints()
            )
        return observer

    def _is_voter(self, replica_key: ReplicaKey) -> bool:
        state = self.voter_states.get(replica_key.id)
        return state is not None and state.matches_key(replica_key)

    def non_leader_voters_by_descending_fetch_offset(self) -> list[ReplicaKey]:
        """The preferred successors a resigning leader names in EndQuorumEpoch."""
        ordered = sorted(self.voter_states.values(), key=ReplicaState.sort_key)
        return [s.replica_key for s in ordered if not s.matches_key(self.local_key)]

    def add_acknowledgement_from(self, voter_id: int) -> None:
        state = self.voter_states.get(voter_id)
        if state is None:
            raise ValueError(f"Unexpected acknowledgement from non-voter {voter_id}")
        state.has_acknowledged_leader = True

    def observer_states(self, now: int) -> dict[ReplicaKey, ReplicaState]:
        """The observers that fetched within the last five minutes (DescribeQuorum)."""
        for key in [
            key
            for key, state in self._observer_states.items()
            if now - state.last_fetch_timestamp >= OBSERVER_SESSION_TIMEOUT_MS
            and key != self.local_key
        ]:
            del self._observer_states[key]
        return self._observer_states

    def close(self) -> None:
        self.accumulator.close()

    def __repr__(self) -> str:
        return (
            f"Leader(localReplicaKey={self.local_key}, epoch={self.epoch}, "
            f"epochStartOffset={self.epoch_start_offset}, highWatermark={self._high_watermark})"
        )
