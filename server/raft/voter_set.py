"""The voters of the quorum and their listeners (Kafka's ``VoterSet``), here the static
set of ``controller.quorum.voters`` (kraft.version 0).

Kafka 4.0 also replicates the voter set in VotersRecord control records for dynamic
quorums (KIP-853, kraft.version 1); Tiercel's quorum is static, so the set is built once
from the configuration, as Kafka's ``VoterSet.fromInetSocketAddresses`` does, and a voter's
key has no directory id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tiercel.server.raft.endpoints import Endpoints, HostPort, Node
from tiercel.server.raft.replica_key import ReplicaKey

__all__ = ["VoterNode", "VoterSet"]


@dataclass(frozen=True, slots=True)
class VoterNode:
    voter_key: ReplicaKey
    listeners: Endpoints

    def is_voter(self, replica_key: ReplicaKey) -> bool:
        return self.voter_key.matches(replica_key)


@dataclass(frozen=True, slots=True)
class VoterSet:
    """Invariant: voters keyed by node id; immutable, safe anywhere."""

    voters: Mapping[int, VoterNode]

    @staticmethod
    def from_addresses(listener_name: str, addresses: Mapping[int, HostPort]) -> VoterSet:
        return VoterSet(
            {
                voter_id: VoterNode(ReplicaKey(voter_id), Endpoints.of({listener_name: address}))
                for voter_id, address in sorted(addresses.items())
            }
        )

    @property
    def voter_ids(self) -> frozenset[int]:
        return frozenset(self.voters)

    @property
    def voter_keys(self) -> list[ReplicaKey]:
        return [node.voter_key for node in self.voters.values()]

    def is_voter(self, replica_key: ReplicaKey) -> bool:
        node = self.voters.get(replica_key.id)
        return node is not None and node.is_voter(replica_key)

    def is_only_voter(self, replica_key: ReplicaKey) -> bool:
        return len(self.voters) == 1 and self.is_voter(replica_key)

    def listeners(self, voter_id: int) -> Endpoints:
        node = self.voters.get(voter_id)
        return Endpoints() if node is None else node.listeners

    def voter_node(self, voter_id: int, listener_name: str) -> Node | None:
        address = self.listeners(voter_id).address(listener_name)
        return None if address is None else Node(voter_id, address.host, address.port)

    def voter_nodes(self, voter_ids: Iterable[int], listener_name: str) -> list[Node]:
        nodes = (self.voter_node(voter_id, listener_name) for voter_id in sorted(voter_ids))
        return [node for node in nodes if node is not None]
