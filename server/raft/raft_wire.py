"""The Raft RPCs on the wire: the versions a controller listener serves, and the change
of an entity between the version on the wire and the latest one the client works with.

The client builds and reads every message in the latest version Kafka speaks
(`raft_util`); a peer may speak an older one (negotiated with ApiVersions as Kafka's
NetworkClient does), so requests and responses are rebuilt field by field: fields a
version lacks are dropped, fields it adds take their schema defaults (Kafka's generated
``write`` does the same when it writes an older version).

Versions are those of Kafka's ``ApiKeys`` for the controller listener: Vote 0-2 (v2:
PreVote, KIP-996), BeginQuorumEpoch 0-1 and EndQuorumEpoch 0-1 (v1: KIP-853 endpoints),
DescribeQuorum 0-2, FetchSnapshot 0-1, Fetch 4-18 (4.0 removed v0-3, KIP-896; v18, from
Kafka 4.1, carries the replica's high watermark, KIP-1166). A Fetch older than v13 names
no topic id and is refused as Kafka's ``RaftUtil.hasValidTopicPartition`` refuses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from tiercel.protocol.entities import build_entity, request_class, response_class
from tiercel.server.raft.raft_util import (
    BEGIN_QUORUM_EPOCH,
    DESCRIBE_QUORUM,
    END_QUORUM_EPOCH,
    FETCH,
    FETCH_SNAPSHOT,
    VOTE,
)

__all__ = [
    "RAFT_API_VERSIONS",
    "fields_of",
    "request_to_latest",
    "request_to_version",
    "response_to_latest",
    "response_to_version",
]

# api key: (min, max) version.
RAFT_API_VERSIONS: Final[Mapping[int, tuple[int, int]]] = {
    FETCH: (4, 18),
    VOTE: (0, 2),
    BEGIN_QUORUM_EPOCH: (0, 1),
    END_QUORUM_EPOCH: (0, 1),
    DESCRIBE_QUORUM: (0, 2),
    FETCH_SNAPSHOT: (0, 1),
}


def fields_of(entity: Any) -> dict[str, Any]:
    """An entity as nested mappings with Kafka's field names (what `build_entity` takes)."""
    return {f.name: _value(getattr(entity, f.name)) for f in dataclasses.fields(entity)}


def _value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_of(value)
    if isinstance(value, tuple):
        return [_value(item) for item in value]
    return value


def _rebuilt(entity: Any, target: type[Any]) -> Any:
    if type(entity) is target:
        return entity
    return build_entity(target, fields_of(entity), fill_missing=True)


def _latest(api_key: int) -> int:
    return RAFT_API_VERSIONS[api_key][1]


def request_to_latest(api_key: int, entity: Any) -> Any:
    return _rebuilt(entity, request_class(api_key, _latest(api_key)))


def request_to_version(api_key: int, entity: Any, version: int) -> Any:
    return _rebuilt(entity, request_class(api_key, version))


def response_to_latest(api_key: int, entity: Any) -> Any:
    return _rebuilt(entity, response_class(api_key, _latest(api_key)))


def response_to_version(api_key: int, entity: Any, version: int) -> Any:
    return _rebuilt(entity, response_class(api_key, version))
