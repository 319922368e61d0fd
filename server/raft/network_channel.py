"""How the Raft client sends requests (Kafka's ``NetworkChannel``): the real channel over
TCP (`KafkaNetworkChannel`) or the tests' in-memory router."""

from __future__ import annotations

from typing import Protocol

from tiercel.server.raft.raft_message import OutboundRequest

__all__ = ["NetworkChannel"]


class NetworkChannel(Protocol):
    @property
    def listener_name(self) -> str:
        """The controller listener the quorum talks on: responses carry the leader's
        address on it."""

    def new_correlation_id(self) -> int: ...

    def send(self, request: OutboundRequest) -> None:
        """Send without waiting; the response (or an error) completes the request."""
