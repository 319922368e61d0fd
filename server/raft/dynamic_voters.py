"""The initial voters of a dynamic quorum as ``tiercel storage format`` takes them
(Kafka's ``DynamicVoter`` and ``DynamicVoters``): ``--initial-controllers`` lists
``id@host:port:directory-id`` entries, comma-separated, the host possibly a bracketed
IPv6 address and the directory id a Kafka uuid (22 characters of URL-safe base64).
The messages are Kafka's.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tiercel.server.raft.endpoints import Endpoints, HostPort
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.voter_set import LOCAL_KRAFT_VERSIONS, VoterNode, VoterSet
from tiercel.storage.checkpoint_file import kafka_str_to_uuid, uuid_to_kafka_str

__all__ = ["DynamicVoter", "DynamicVoters"]


@dataclass(frozen=True, slots=True)
class DynamicVoter:
    """Invariant: a non-negative node id and a port within 0..65535. A value."""

    directory_id: uuid.UUID
    node_id: int
    host: str
    port: int

    @staticmethod
    def parse(text: str) -> DynamicVoter:
        """ValueError with Kafka's message (DynamicVoter.parse) for a malformed entry."""
        text = text.strip()
        at = text.find("@")
        if at < 0:
            raise ValueError("No @ found in dynamic voter string.")
        if at == 0:
            raise ValueError("Invalid @ at beginning of dynamic voter string.")
        node_id = _parse_int(text[:at], "Failed to parse node id in dynamic voter string.")
        if node_id < 0:
            raise ValueError(f"Invalid negative node id {node_id} in dynamic voter string.")
        rest = text[at + 1 :]
        if not rest:
            raise ValueError("No hostname found after node id.")
        if rest.startswith("["):
            end = rest.find("]")
            if end < 0:
                raise ValueError(
                    "Hostname began with left bracket, but no right bracket was found."
                )
            host, rest = rest[1:end], rest[end + 1 :]
        else:
            end = rest.find(":")
            if end < 0:
                raise ValueError("No colon following hostname could be found.")
            host, rest = rest[:end], rest[end:]
        if not rest.startswith(":"):
            raise ValueError("Port section must start with a colon.")
        rest = rest[1:]
        end = rest.find(":")
        if end < 0:
            raise ValueError("No colon following port could be found.")
        port = _parse_int(rest[:end], "Failed to parse port in dynamic voter string.")
        if not 0 <= port <= 65535:
            raise ValueError(f"Invalid port {port} in dynamic voter string.")
        try:
            directory_id = kafka_str_to_uuid(rest[end + 1 :])
        except ValueError:
            raise ValueError("Failed to parse directory ID in dynamic voter string.") from None
        return DynamicVoter(directory_id, node_id, host, port)

    def to_voter_node(self, controller_listener_name: str) -> VoterNode:
        """Kafka's DynamicVoter.toVoterNode: supporting kraft.version 0 and 1."""
        return VoterNode(
            ReplicaKey.of(self.node_id, self.directory_id),
            Endpoints.of({controller_listener_name: HostPort(self.host, self.port)}),
            LOCAL_KRAFT_VERSIONS,
        )

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}:{uuid_to_kafka_str(self.directory_id)}"


@dataclass(frozen=True, slots=True)
class DynamicVoters:
    """Invariant: at least one voter, each node id once; by node id."""

    voters: Mapping[int, DynamicVoter]

    @staticmethod
    def of(voters: Sequence[DynamicVoter]) -> DynamicVoters:
        """ValueError as Kafka's DynamicVoters constructor says it."""
        if not voters:
            raise ValueError("No voters given.")
        by_id: dict[int, DynamicVoter] = {}
        for voter in voters:
            if voter.node_id in by_id:
                raise ValueError(f"Node id {voter.node_id} was specified more than once.")
            by_id[voter.node_id] = voter
        return DynamicVoters(dict(sorted(by_id.items())))

    @staticmethod
    def parse(text: str) -> DynamicVoters:
        return DynamicVoters.of(
            [DynamicVoter.parse(entry) for entry in text.strip().split(",") if entry]
        )

    def to_voter_set(self, controller_listener_name: str) -> VoterSet:
        return VoterSet(
            {
                node_id: voter.to_voter_node(controller_listener_name)
                for node_id, voter in self.voters.items()
            }
        )


def _parse_int(text: str, message: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(message) from None
