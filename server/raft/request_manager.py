"""At most one request in flight per destination, with backoff and timeout (Kafka's
``RequestManager``). A follower keeps a single Fetch in flight across all nodes, or it
could append the same offsets twice; before a leader is known, Fetch goes to one of the
bootstrap servers at random."""

from __future__ import annotations

import enum
import random
from collections.abc import Sequence

from tiercel.server.raft.endpoints import Node

__all__ = ["RequestManager"]


class _State(enum.Enum):
    AWAITING_RESPONSE = "awaiting"
    BACKING_OFF = "backing-off"
    READY = "ready"


class _ConnectionState:
    __slots__ = (
        "in_flight_correlation_id",
        "last_fail_ms",
        "last_send_ms",
        "request_timeout_ms",
        "retry_backoff_ms",
        "state",
    )

    def __init__(self, retry_backoff_ms: int, request_timeout_ms: int) -> None:
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.state = _State.READY
        self.last_send_ms = 0
        self.last_fail_ms = 0
        self.in_flight_correlation_id: int | None = None

    def is_backoff_complete(self, now: int) -> bool:
        return self.state is _State.BACKING_OFF and now >= self.last_fail_ms + self.retry_backoff_ms

    def has_request_timed_out(self, now: int) -> bool:
        return (
            self.state is _State.AWAITING_RESPONSE
            and now >= self.last_send_ms + self.request_timeout_ms
        )

    def is_ready(self, now: int) -> bool:
        if self.is_backoff_complete(now) or self.has_request_timed_out(now):
            self.state = _State.READY
        return self.state is _State.READY

    def is_backing_off(self, now: int) -> bool:
        return self.state is _State.BACKING_OFF and not self.is_backoff_complete(now)

    def has_inflight_request(self, now: int) -> bool:
        return self.state is _State.AWAITING_RESPONSE and not self.has_request_timed_out(now)

    def remaining_request_time_ms(self, now: int) -> int:
        if self.has_inflight_request(now):
            return self.last_send_ms + self.request_timeout_ms - now
        return 0

    def remaining_backoff_ms(self, now: int) -> int:
        if self.is_backing_off(now):
            return self.last_fail_ms + self.retry_backoff_ms - now
        return 0


class RequestManager:
    """Event-loop only."""

    def __init__(
        self,
        bootstrap_servers: Sequence[Node],
        retry_backoff_ms: int,
        request_timeout_ms: int,
        rng: random.Random,
    ) -> None:
        self.bootstrap_servers = list(bootstrap_servers)
        self._retry_backoff_ms = retry_backoff_ms
        self._request_timeout_ms = request_timeout_ms
        self._random = rng
        self._connections: dict[int, _ConnectionState] = {}

    def _drop_finished(self, now: int) -> None:
        for node_id in [
            node_id
            for node_id, c in self._connections.items()
            if c.has_request_timed_out(now) or c.is_backoff_complete(now)
        ]:
            del self._connections[node_id]

    def has_any_inflight_request(self, now: int) -> bool:
        self._drop_finished(now)
        return any(c.has_inflight_request(now) for c in self._connections.values())

    def find_ready_bootstrap_server(self, now: int) -> Node | None:
        """A random ready bootstrap server, none while any request is in flight."""
        if self.has_any_inflight_request(now) or not self.bootstrap_servers:
            return None
        start = self._random.randrange(len(self.bootstrap_servers))
        count = len(self.bootstrap_servers)
        for i in range(count):
            node = self.bootstrap_servers[(start + i) % count]
            if self.is_ready(node, now):
                return node
        return None

    def backoff_before_available_bootstrap_server(self, now: int) -> int:
        self._drop_finished(now)
        backoff = self._retry_backoff_ms
        for connection in self._connections.values():
            if connection.has_inflight_request(now):
                return connection.remaining_request_time_ms(now)
            if connection.is_backing_off(now):
                backoff = min(backoff, connection.remaining_backoff_ms(now))
        if any(self.is_ready(node, now) for node in self.bootstrap_servers):
            return 0
        return backoff

    def has_request_timed_out(self, node: Node, now: int) -> bool:
        state = self._connections.get(node.id)
        return state is not None and state.has_request_timed_out(now)

    def is_ready(self, node: Node, now: int) -> bool:
        state = self._connections.get(node.id)
        if state is None:
            return True
        ready = state.is_ready(now)
        if ready:
            self.reset(node)
        return ready

    def is_backing_off(self, node: Node, now: int) -> bool:
        state = self._connections.get(node.id)
        return state is not None and state.is_backing_off(now)

    def remaining_request_time_ms(self, node: Node, now: int) -> int:
        state = self._connections.get(node.id)
        return 0 if state is None else state.remaining_request_time_ms(now)

    def remaining_backoff_ms(self, node: Node, now: int) -> int:
        state = self._connections.get(node.id)
        return 0 if state is None else state.remaining_backoff_ms(now)

    def is_response_expected(self, node: Node, correlation_id: int) -> bool:
        state = self._connections.get(node.id)
        return state is not None and state.in_flight_correlation_id == correlation_id

    def on_response_result(self, node: Node, correlation_id: int, success: bool, now: int) -> None:
        if not self.is_response_expected(node, correlation_id):
            return
        if success:
            self.reset(node)
        else:
            state = self._connections[node.id]
            state.last_fail_ms = now
            state.state = _State.BACKING_OFF
            state.in_flight_correlation_id = None

    def on_request_sent(self, node: Node, correlation_id: int, now: int) -> None:
        state = self._connections.get(node.id)
        if state is None:
            state = self._connections[node.id] = _ConnectionState(
                self._retry_backoff_ms, self._request_timeout_ms
            )
        state.last_send_ms = now
        state.in_flight_correlation_id = correlation_id
        state.state = _State.AWAITING_RESPONSE

    def reset(self, node: Node) -> None:
        self._connections.pop(node.id, None)

    def reset_all(self) -> None:
        self._connections.clear()
