"""What a replica persists after every durable state change: its epoch, the leader it
knows and whom it voted for (Kafka's ``ElectionState``), and its ``quorum-state`` form.

``quorum-state`` is one line of compact JSON, no newline after it: the JSON form of
Kafka's ``QuorumStateData`` plus a ``data_version`` field, as FileQuorumStateStore writes
it. data_version 0 is what kraft.version 0 (a static ``controller.quorum.voters``
quorum) writes, 1 what kraft.version 1 (KIP-853) writes:

    {"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}

    {"leaderId":-1,"leaderEpoch":2,"votedId":1,"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ",
     "data_version":1}

Ids -1 mean none; a directory id is Kafka's Uuid string (all zeros: none).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.storage.checkpoint_file import kafka_str_to_uuid, uuid_to_kafka_str

__all__ = ["ElectionState", "QuorumStateFormatError"]

_UNKNOWN_LEADER_ID: Final = -1
_NOT_VOTED: Final = -1
_ZERO_UUID_STR: Final = "AAAAAAAAAAAAAAAAAAAAAA"
DATA_VERSION: Final = "data_version"
LOWEST_SUPPORTED_VERSION: Final = 0
HIGHEST_SUPPORTED_VERSION: Final = 1


class QuorumStateFormatError(ValueError):
    """``quorum-state`` is not JSON Kafka's FileQuorumStateStore could have written."""


@dataclass(frozen=True, slots=True)
class ElectionState:
    """Invariants: ids are non-negative when present; ``voters`` matters only to
    data_version 0, which lists them. A value; safe anywhere."""

    epoch: int
    leader_id: int | None
    voted_key: ReplicaKey | None
    voters: frozenset[int]

    @staticmethod
    def with_voted_candidate(
        epoch: int, voted_key: ReplicaKey, voters: Iterable[int]
    ) -> ElectionState:
        if voted_key.id < 0:
            raise ValueError(f"Illegal voted Id {voted_key.id}: must be non-negative")
        return ElectionState(epoch, None, voted_key, frozenset(voters))

    @staticmethod
    def with_elected_leader(
        epoch: int, leader_id: int, voted_key: ReplicaKey | None, voters: Iterable[int]
    ) -> ElectionState:
        """A known leader; a vote cast earlier in the same epoch is kept, so that a replica
        never votes twice in one epoch (Kafka 4.0 keeps it since KIP-996)."""
        if leader_id < 0:
            raise ValueError(f"Illegal leader Id {leader_id}: must be non-negative")
        return ElectionState(epoch, leader_id, voted_key, frozenset(voters))

    @staticmethod
    def with_unknown_leader(epoch: int, voters: Iterable[int]) -> ElectionState:
        return ElectionState(epoch, None, None, frozenset(voters))

    def is_leader(self, node_id: int) -> bool:
        return self.leader_id == node_id

    @property
    def has_leader(self) -> bool:
        return self.leader_id is not None

    @property
    def has_voted(self) -> bool:
        return self.voted_key is not None

    def is_voted_candidate(self, node_key: ReplicaKey) -> bool:
        """Whether this replica voted for ``node_key``: same id and, when a directory id
        was persisted, the same one (kraft.version 0 persists none)."""
        voted = self.voted_key
        if voted is None or voted.id != node_key.id:
            return False
        return voted.directory_id is None or voted.directory_id == node_key.directory_id

    # -- quorum-state ------------------------------------------------------------------

    def to_json(self, version: int) -> str:
        """The ``quorum-state`` line (Kafka's toQuorumStateData, QuorumStateDataJsonConverter
        and Jackson's compact ``ObjectNode.toString``)."""
        fields: dict[str, Any] = {}
        if version == 0:
            fields["clusterId"] = ""
        fields["leaderId"] = _UNKNOWN_LEADER_ID if self.leader_id is None else self.leader_id
        fields["leaderEpoch"] = self.epoch
        fields["votedId"] = _NOT_VOTED if self.voted_key is None else self.voted_key.id
        if version == 0:
            fields["appliedOffset"] = 0
            fields["currentVoters"] = [{"voterId": voter} for voter in sorted(self.voters)]
        elif version == 1:
            directory = None if self.voted_key is None else self.voted_key.directory_id
            fields["votedDirectoryId"] = (
                _ZERO_UUID_STR if directory is None else uuid_to_kafka_str(directory)
            )
        else:
            raise ValueError(f"File quorum state store doesn't handle supported version {version}")
        fields[DATA_VERSION] = version
        return json.dumps(fields, separators=(",", ":"))

    @staticmethod
    def from_json(line: str) -> ElectionState:
        """Parse a ``quorum-state`` line; QuorumStateFormatError if it is not one."""
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise QuorumStateFormatError(f"quorum-state is not JSON: {e}") from e
        if not isinstance(data, dict):
            raise QuorumStateFormatError(f"Deserialized node {line} is not an object node")
        version = data.get(DATA_VERSION)
        if not isinstance(version, int):
            raise QuorumStateFormatError(
                f"Deserialized node {line} does not have {DATA_VERSION} field"
            )
        if not LOWEST_SUPPORTED_VERSION <= version <= HIGHEST_SUPPORTED_VERSION:
            raise QuorumStateFormatError(
                f"data_version ({version}) is not within the min ({LOWEST_SUPPORTED_VERSION}) "
                f"and max ({HIGHEST_SUPPORTED_VERSION}) supported version"
            )
        leader_id = _int_field(data, "leaderId")
        voted_id = _int_field(data, "votedId")
        voted_key = None
        if voted_id != _NOT_VOTED:
            directory = None
            if version >= 1:
                text = data.get("votedDirectoryId")
                if not isinstance(text, str):
                    raise QuorumStateFormatError("quorum-state has no votedDirectoryId")
                try:
                    directory = kafka_str_to_uuid(text)
                except ValueError as e:
                    raise QuorumStateFormatError(str(e)) from e
            voted_key = ReplicaKey.of(voted_id, directory)
        voters: frozenset[int] = frozenset()
        if version == 0:
            voters = frozenset(_voter_ids(data.get("currentVoters")))
        return ElectionState(
            _int_field(data, "leaderEpoch"),
            None if leader_id == _UNKNOWN_LEADER_ID else leader_id,
            voted_key,
            voters,
        )


def _int_field(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise QuorumStateFormatError(f"quorum-state field {name} is missing or not a number")
    return value


def _voter_ids(value: object) -> Iterable[int]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise QuorumStateFormatError("quorum-state field currentVoters is not a list")
    return [_int_field(voter, "voterId") for voter in value if isinstance(voter, dict)]
