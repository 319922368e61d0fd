"""Network addresses in the quorum: a node's listeners (Kafka's ``Endpoints``) and a
request destination (Kafka's ``Node``).

KIP-853 carries the leader's listeners in BeginQuorumEpoch and EndQuorumEpoch
(``LeaderEndpoints``: name, host, port) and every response carries the leader's
address on the listener the request came in on (``NodeEndpoints``: node id, host, port),
so a replica that does not know the leader's address learns it from any answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Endpoints", "HostPort", "Node"]


@dataclass(frozen=True, slots=True)
class HostPort:
    """A host and port (Kafka's ``InetSocketAddress``, unresolved)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Node:
    """Where a request goes: a voter's id, or a negative id for a bootstrap server whose
    node id is not known (Kafka's ``Node``; the ids -2, -3, ... of KafkaRaftClient)."""

    id: int
    host: str
    port: int

    @property
    def address(self) -> HostPort:
        return HostPort(self.host, self.port)


class _NameHostPort(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


class _NodeHostPort(Protocol):
    @property
    def node_id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Listener name -> address, sorted by name. Empty: the leader's address is unknown.

    Invariant: a value; safe anywhere."""

    listeners: tuple[tuple[str, HostPort], ...] = ()

    @staticmethod
    def of(listeners: Mapping[str, HostPort]) -> Endpoints:
        return Endpoints(tuple(sorted(listeners.items())))

    @property
    def is_empty(self) -> bool:
        return not self.listeners

    def __len__(self) -> int:
        return len(self.listeners)

    def address(self, listener_name: str) -> HostPort | None:
        for name, address in self.listeners:
            if name == listener_name:
                return address
        return None

    def to_leader_endpoints(self) -> list[dict[str, Any]]:
        """BeginQuorumEpoch/EndQuorumEpoch ``LeaderEndpoints`` (Kafka's
        ``Endpoints.toBeginQuorumEpochRequest``)."""
        return [{"name": n, "host": a.host, "port": a.port} for n, a in self.listeners]

    def to_describe_quorum_listeners(self) -> list[dict[str, Any]]:
        return [{"name": n, "host": a.host, "port": a.port} for n, a in self.listeners]

    def to_node_endpoints(self, node_id: int, listener_name: str) -> list[dict[str, Any]]:
        """A response's ``NodeEndpoints``: the leader's address on ``listener_name``
        (Kafka's RaftUtil adds the leader's endpoint for the request's listener)."""
        address = self.address(listener_name)
        if node_id < 0 or address is None:
            return []
        return [{"node_id": node_id, "host": address.host, "port": address.port}]

    @staticmethod
    def from_leader_endpoints(entries: Iterable[_NameHostPort]) -> Endpoints:
        return Endpoints.of({e.name: HostPort(e.host, int(e.port)) for e in entries})

    @staticmethod
    def from_node_endpoints(
        listener_name: str, leader_id: int, entries: Sequence[_NodeHostPort]
    ) -> Endpoints:
        """The leader's entry of a response's ``NodeEndpoints``, as the address on the
        listener this replica sent the request to (Kafka's ``Endpoints.fromFetchResponse``
        and siblings)."""
        for entry in entries:
            if entry.node_id == leader_id:
                return Endpoints.of({listener_name: HostPort(entry.host, int(entry.port))})
        return Endpoints()
