"""The active controller's view of broker sessions (Kafka's ``BrokerHeartbeatManager``
and ``BrokerControlState``).

Soft state: it lives only on the active controller, is never written to the log, and
starts afresh when a controller claims leadership, every registered broker getting a
full session (Kafka's ``ClusterControlManager.activate``). Whether a broker is fenced or
in controlled shutdown is the replayed registration's business (`ClusterControlManager`);
this class keeps when it last heartbeat and which metadata offset it reported.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tiercel.server.raft.timer import Time

__all__ = ["BrokerControlState", "BrokerControlStates", "BrokerHeartbeatManager"]


class BrokerControlState(enum.Enum):
    """Kafka's ``BrokerControlState``: (fenced, in controlled shutdown, should shut down)."""

    FENCED = (True, False, False)
    UNFENCED = (False, False, False)
    CONTROLLED_SHUTDOWN = (False, True, False)
    SHUTDOWN_NOW = (True, False, True)

    @property
    def fenced(self) -> bool:
        return self.value[0]

    @property
    def in_controlled_shutdown(self) -> bool:
        return self.value[1]

    @property
    def should_shut_down(self) -> bool:
        return self.value[2]


@dataclass(frozen=True, slots=True)
class BrokerControlStates:
    current: BrokerControlState
    next: BrokerControlState


@dataclass(slots=True)
class _BrokerHeartbeatState:
    last_contact_ms: int
    metadata_offset: int = -1


class BrokerHeartbeatManager:
    """Event-loop only. A session is valid for ``session_timeout_ms`` after the broker's
    last heartbeat (or registration, or this controller's activation)."""

    def __init__(self, time: Time, session_timeout_ms: int) -> None:
        self._time = time
        self._session_timeout_ms = session_timeout_ms
        self._brokers: dict[int, _BrokerHeartbeatState] = {}

    def register(self, broker_id: int) -> None:
        """Start (or keep) a session for ``broker_id``."""
        state = self._brokers.get(broker_id)
        if state is None:
            self._brokers[broker_id] = _BrokerHeartbeatState(self._time.milliseconds())
        else:
            state.last_contact_ms = self._time.milliseconds()

    def remove(self, broker_id: int) -> None:
        self._brokers.pop(broker_id, None)

    def touch(self, broker_id: int, metadata_offset: int) -> None:
        state = self._brokers.setdefault(broker_id, _BrokerHeartbeatState(0))
        state.last_contact_ms = self._time.milliseconds()
        state.metadata_offset = metadata_offset

    def has_valid_session(self, broker_id: int) -> bool:
        state = self._brokers.get(broker_id)
        return state is not None and not self._expired(state)

    def _expired(self, state: _BrokerHeartbeatState) -> bool:
        return self._time.milliseconds() - state.last_contact_ms >= self._session_timeout_ms

    def find_stale_brokers(self, unfenced: Iterable[int]) -> list[int]:
        """Unfenced brokers whose session expired (Kafka's ``findStaleBrokers``)."""
        return [b for b in unfenced if b in self._brokers and self._expired(self._brokers[b])]

    def next_check_time_ms(self, unfenced: Iterable[int]) -> int | None:
        """When the first of these brokers' sessions expires (Kafka's
        ``nextCheckTimeNs``); None if none is tracked."""
        times = [
            self._brokers[b].last_contact_ms + self._session_timeout_ms
            for b in unfenced
            if b in self._brokers
        ]
        return min(times, default=None)

    def calculate_next_broker_state(
        self,
        current: BrokerControlState,
        want_fence: bool,
        want_shut_down: bool,
        current_metadata_offset: int,
        register_broker_record_offset: int,
        has_leaderships: Callable[[], bool],
    ) -> BrokerControlStates:
        """Kafka's ``calculateNextBrokerState``. A fenced broker is unfenced once its
        metadata has caught up to its own registration; a controlled shutdown ends when
        the broker leads nothing. Kafka also waits until every active broker has seen
        the record that began the shutdown (``lowestActiveOffset``); leadership moved
        away is what the broker needs here, and it learns that from the same log."""
        if current == BrokerControlState.FENCED:
            if want_shut_down:
                return BrokerControlStates(current, BrokerControlState.SHUTDOWN_NOW)
            if not want_fence and current_metadata_offset >= register_broker_record_offset:
                return BrokerControlStates(current, BrokerControlState.UNFENCED)
            return BrokerControlStates(current, BrokerControlState.FENCED)
        if current == BrokerControlState.UNFENCED:
            if want_fence:
                next_state = (
                    BrokerControlState.SHUTDOWN_NOW if want_shut_down else BrokerControlState.FENCED
                )
                return BrokerControlStates(current, next_state)
            if want_shut_down:
                next_state = (
                    BrokerControlState.CONTROLLED_SHUTDOWN
                    if has_leaderships()
                    else BrokerControlState.SHUTDOWN_NOW
                )
                return BrokerControlStates(current, next_state)
            return BrokerControlStates(current, BrokerControlState.UNFENCED)
        if current == BrokerControlState.CONTROLLED_SHUTDOWN and has_leaderships():
            return BrokerControlStates(current, BrokerControlState.CONTROLLED_SHUTDOWN)
        return BrokerControlStates(current, BrokerControlState.SHUTDOWN_NOW)
