"""The voters of the quorum and their listeners (Kafka's ``VoterSet``).

Two sources, as in Kafka 4.0: the static ``controller.quorum.voters`` (kraft.version 0:
built once from the configuration, as ``VoterSet.fromInetSocketAddresses`` does, keys
without directory ids), or, with KIP-853 (kraft.version 1), a VotersRecord control record
of the bootstrap checkpoint, a snapshot or the log (``VoterSet.fromVotersRecord``: keys
with directory ids, each voter's listeners and supported kraft.version range).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from kio.schema.types import BrokerId
from kio.schema.voters_record.v0.data import Endpoint, KRaftVersionFeature, Voter, VotersRecord
from kio.static.primitive import i16, u16

from tiercel.server.raft.endpoints import Endpoints, HostPort, Node
from tiercel.server.raft.replica_key import ReplicaKey

__all__ = ["LOCAL_KRAFT_VERSIONS", "SupportedVersionRange", "VoterNode", "VoterSet"]


@dataclass(frozen=True, slots=True)
class SupportedVersionRange:
    """The kraft.version levels a voter supports (Kafka's ``SupportedVersionRange``)."""

    min_version: int = 0
    max_version: int = 0


# What this replica supports: kraft.version 0 and 1 (Kafka's KafkaRaftClient
# localSupportedKRaftVersion).
LOCAL_KRAFT_VERSIONS: Final = SupportedVersionRange(0, 1)


@dataclass(frozen=True, slots=True)
class VoterNode:
    voter_key: ReplicaKey
    listeners: Endpoints
    supported_kraft_version: SupportedVersionRange = SupportedVersionRange()

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

    @staticmethod
    def from_voters_record(record: VotersRecord) -> VoterSet:
        """Kafka's ``VoterSet.fromVotersRecord``."""
        return VoterSet(
            {
                int(voter.voter_id): VoterNode(
                    ReplicaKey.of(int(voter.voter_id), voter.voter_directory_id),
                    Endpoints.of({e.name: HostPort(e.host, int(e.port)) for e in voter.endpoints}),
                    SupportedVersionRange(
                        int(voter.k_raft_version_feature.min_supported_version),
                        int(voter.k_raft_version_feature.max_supported_version),
                    ),
                )
                for voter in sorted(record.voters, key=lambda v: int(v.voter_id))
            }
        )

    def to_voters_record(self, version: int = 0) -> VotersRecord:
        """Kafka's ``VoterSet.toVotersRecord``: the zero uuid for a voter without a
        directory id."""
        return VotersRecord(
            version=i16(version),
            voters=tuple(
                Voter(
                    voter_id=BrokerId(node.voter_key.id),
                    voter_directory_id=node.voter_key.directory_id,
                    endpoints=tuple(
                        Endpoint(name=name, host=address.host, port=u16(address.port))
                        for name, address in node.listeners.listeners
                    ),
                    k_raft_version_feature=KRaftVersionFeature(
                        min_supported_version=i16(node.supported_kraft_version.min_version),
                        max_supported_version=i16(node.supported_kraft_version.max_version),
                    ),
                )
                for node in self.voters.values()
            ),
        )

    @property
    def voter_ids(self) -> frozenset[int]:
        return frozenset(self.voters)

    @property
    def voter_keys(self) -> list[ReplicaKey]:
        return [node.voter_key for node in self.voters.values()]

    @property
    def is_empty(self) -> bool:
        return not self.voters

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

    def update_voter(self, voter: VoterNode) -> VoterSet:
        """The set with ``voter``'s endpoints and versions in place of its entry
        (Kafka's ``VoterSet.updateVoter``); ValueError unless its key is a voter."""
        current = self.voters.get(voter.voter_key.id)
        if current is None or current.voter_key != voter.voter_key:
            raise ValueError(f"Update expected for voter {voter} in voter set {self}")
        return VoterSet({**self.voters, voter.voter_key.id: voter})

    def has_overlapping_majority(self, other: VoterSet) -> bool:
        """Every majority of one set meets every majority of the other: the two differ
        by at most one voter each way (Kafka's ``VoterSet.hasOverlappingMajority``), so
        a change of the set cannot commit two conflicting offsets."""
        these, those = set(self.voter_keys), set(other.voter_keys)
        return len(these - those) <= 1 and len(those - these) <= 1
