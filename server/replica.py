"""Replica: what a partition leader knows of one follower (Kafka's ``cluster.Replica``).

The leader learns a follower's log end offset from the fetch offset of each of its
Fetch requests (Kafka's ``Replica.updateFetchStateOrThrow``), and when it was last caught up:
``last_caught_up_time_ms`` is the latest time t at which the follower had fetched up to
the leader's log end offset as of t. A fetch reaching the leader's log end offset at
the time it arrives sets it to the fetch time; a fetch reaching only the log end offset
the leader had at the previous fetch sets it to that previous fetch's time, so a
follower that is always one produce behind under a steady stream of small writes still
counts as caught up (Kafka's ``Replica.lastCaughtUpTimeMs``: fetching alone does not make
a replica caught up).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from tiercel.storage.log_values import LogOffsetMetadata

UNKNOWN_OFFSET: Final = -1
_UNKNOWN_OFFSET_METADATA: Final = LogOffsetMetadata(UNKNOWN_OFFSET)


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One snapshot of a follower as its leader sees it.

    ``log_end_offset_metadata`` is unknown (-1) until the follower's first fetch to this
    leader; ``last_fetch_leader_log_end_offset`` is the leader's log end offset when the
    previous fetch arrived, ``last_fetch_time_ms`` that fetch's time.
    """

    log_start_offset: int
    log_end_offset_metadata: LogOffsetMetadata
    last_fetch_leader_log_end_offset: int
    last_fetch_time_ms: int
    last_caught_up_time_ms: int

    @property
    def log_end_offset(self) -> int:
        return self.log_end_offset_metadata.message_offset

    def is_caught_up(
        self, leader_end_offset: int, now_ms: int, replica_lag_time_max_ms: int
    ) -> bool:
        """At the leader's log end, or caught up within ``replica.lag.time.max.ms``."""
        return (
            leader_end_offset == self.log_end_offset
            or now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms
        )


EMPTY_REPLICA_STATE: Final = ReplicaState(
    log_start_offset=UNKNOWN_OFFSET,
    log_end_offset_metadata=_UNKNOWN_OFFSET_METADATA,
    last_fetch_leader_log_end_offset=0,
    last_fetch_time_ms=0,
    last_caught_up_time_ms=0,
)


class Replica:
    """A remote replica of a partition this broker leads. Event-loop only.

    Invariant: ``state.last_caught_up_time_ms`` never decreases except when a new
    leadership resets it (`reset_replica_state`)."""

    __slots__ = ("broker_id", "state")

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.state = EMPTY_REPLICA_STATE

    def update_fetch_state(
        self,
        follower_fetch_offset_metadata: LogOffsetMetadata,
        follower_start_offset: int,
        follower_fetch_time_ms: int,
        leader_end_offset: int,
    ) -> None:
        """Record a fetch: the follower has everything below its fetch offset."""
        current = self.state
        fetch_offset = follower_fetch_offset_metadata.message_offset
        if fetch_offset >= leader_end_offset:
            caught_up = max(current.last_caught_up_time_ms, follower_fetch_time_ms)
        elif fetch_offset >= current.last_fetch_leader_log_end_offset:
            caught_up = max(current.last_caught_up_time_ms, current.last_fetch_time_ms)
        else:
            caught_up = current.last_caught_up_time_ms
        self.state = ReplicaState(
            log_start_offset=follower_start_offset,
            log_end_offset_metadata=follower_fetch_offset_metadata,
            last_fetch_leader_log_end_offset=max(
                leader_end_offset, current.last_fetch_leader_log_end_offset
            ),
            last_fetch_time_ms=follower_fetch_time_ms,
            last_caught_up_time_ms=caught_up,
        )

    def reset_replica_state(
        self, now_ms: int, leader_end_offset: int, is_new_leader: bool, is_follower_in_sync: bool
    ) -> None:
        """A new leader epoch on this leader. An in-sync follower counts as caught up now
        (it gets replica.lag.time.max.ms to fetch), any other as never, so that it does
        not hold the high watermark back. A broker that only now became leader forgets
        what it knew of the follower's log, which may have changed meanwhile."""
        caught_up = now_ms if is_follower_in_sync else 0
        if is_new_leader:
            self.state = replace(
                EMPTY_REPLICA_STATE,
                last_fetch_leader_log_end_offset=UNKNOWN_OFFSET,
                last_caught_up_time_ms=caught_up,
            )
        else:
            self.state = replace(
                self.state,
                last_fetch_leader_log_end_offset=leader_end_offset,
                last_fetch_time_ms=now_ms if is_follower_in_sync else 0,
                last_caught_up_time_ms=caught_up,
            )

    def __repr__(self) -> str:
        s = self.state
        return (
            f"Replica(broker_id={self.broker_id}, log_end_offset={s.log_end_offset}, "
            f"log_start_offset={s.log_start_offset}, "
            f"last_caught_up_time_ms={s.last_caught_up_time_ms}, "
            f"last_fetch_time_ms={s.last_fetch_time_ms})"
        )
