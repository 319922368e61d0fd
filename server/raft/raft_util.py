"""Requests and responses of the Raft RPCs for the one partition ``__cluster_metadata-0``
(Kafka's ``RaftUtil``), as kio entities of the latest version Kafka 4.0 speaks:
Vote v2, BeginQuorumEpoch v1, EndQuorumEpoch v1, Fetch v17, FetchSnapshot v1,
DescribeQuorum v2. Responses carry the leader's address on the listener the request
came in on (KIP-853 NodeEndpoints); `raft_wire` turns them into the version asked for.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

from kio.schema.begin_quorum_epoch.v1.request import BeginQuorumEpochRequest
from kio.schema.begin_quorum_epoch.v1.response import BeginQuorumEpochResponse
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from kio.schema.describe_quorum.v2.response import DescribeQuorumResponse
from kio.schema.end_quorum_epoch.v1.request import EndQuorumEpochRequest
from kio.schema.end_quorum_epoch.v1.response import EndQuorumEpochResponse
from kio.schema.fetch.v18.request import FetchRequest
from kio.schema.fetch.v18.response import FetchResponse
from kio.schema.fetch_snapshot.v1.request import FetchSnapshotRequest
from kio.schema.fetch_snapshot.v1.response import FetchSnapshotResponse
from kio.schema.vote.v2.request import VoteRequest
from kio.schema.vote.v2.response import VoteResponse

from tiercel.protocol.entities import build_entity
from tiercel.protocol.errors import ErrorCode
from tiercel.server.raft.endpoints import Endpoints
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.replica_state import ReplicaState
from tiercel.storage.topic_partition import TopicPartition

__all__ = [
    "RESPONSE_TYPES",
    "describe_quorum_response",
    "error_response",
    "has_valid_topic_partition",
]

E = TypeVar("E")

VOTE: Final = 52
BEGIN_QUORUM_EPOCH: Final = 53
END_QUORUM_EPOCH: Final = 54
DESCRIBE_QUORUM: Final = 55
FETCH: Final = 1
FETCH_SNAPSHOT: Final = 59

REQUEST_TYPES: Final[Mapping[int, type[Any]]] = {
    VOTE: VoteRequest,
    BEGIN_QUORUM_EPOCH: BeginQuorumEpochRequest,
    END_QUORUM_EPOCH: EndQuorumEpochRequest,
    DESCRIBE_QUORUM: DescribeQuorumRequest,
    FETCH: FetchRequest,
    FETCH_SNAPSHOT: FetchSnapshotRequest,
}
RESPONSE_TYPES: Final[Mapping[int, type[Any]]] = {
    VOTE: VoteResponse,
    BEGIN_QUORUM_EPOCH: BeginQuorumEpochResponse,
    END_QUORUM_EPOCH: EndQuorumEpochResponse,
    DESCRIBE_QUORUM: DescribeQuorumResponse,
    FETCH: FetchResponse,
    FETCH_SNAPSHOT: FetchSnapshotResponse,
}


def _build(entity_type: type[E], values: Mapping[str, Any]) -> E:
    return build_entity(entity_type, values, fill_missing=True)


def error_response(api_key: int, error: ErrorCode) -> Any:
    """A response with only its top-level error (Kafka's RaftUtil.errorResponse)."""
    return _build(RESPONSE_TYPES[api_key], {"error_code": error})


def _directory(key: ReplicaKey) -> uuid.UUID | None:
    return key.directory_id


def _topic(tp: TopicPartition, partition: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"topic_name": tp.topic, "partitions": [{"partition_index": tp.partition, **partition}]}
    ]


def has_valid_topic_partition(topics: Sequence[Any], tp: TopicPartition) -> bool:
    """One topic named ``tp.topic`` with the one partition (Vote, Begin/EndQuorumEpoch,
    DescribeQuorum; Kafka's RaftUtil.hasValidTopicPartition)."""
    return (
        len(topics) == 1
        and topics[0].topic_name == tp.topic
        and len(topics[0].partitions) == 1
        and topics[0].partitions[0].partition_index == tp.partition
    )


# -- Vote ------------------------------------------------------------------------------


def vote_request(
    tp: TopicPartition,
    cluster_id: str,
    replica_epoch: int,
    replica_key: ReplicaKey,
    voter_key: ReplicaKey,
    last_epoch: int,
    last_epoch_end_offset: int,
    pre_vote: bool,
) -> VoteRequest:
    partition = {
        "replica_epoch": replica_epoch,
        "replica_id": replica_key.id,
        "replica_directory_id": _directory(replica_key),
        "voter_directory_id": _directory(voter_key),
        "last_offset_epoch": last_epoch,
        "last_offset": last_epoch_end_offset,
        "pre_vote": pre_vote,
    }
    return _build(
        VoteRequest,
        {"cluster_id": cluster_id, "voter_id": voter_key.id, "topics": _topic(tp, partition)},
    )


def vote_response(
    listener_name: str,
    tp: TopicPartition,
    partition_error: ErrorCode,
    epoch: int,
    leader_id: int,
    vote_granted: bool,
    endpoints: Endpoints,
) -> VoteResponse:
    partition = {
        "error_code": partition_error,
        "leader_id": leader_id,
        "leader_epoch": epoch,
        "vote_granted": vote_granted,
    }
    return _build(
        VoteResponse,
        {
            "error_code": ErrorCode.none,
            "topics": _topic(tp, partition),
            "node_endpoints": endpoints.to_node_endpoints(leader_id, listener_name),
        },
    )


# -- BeginQuorumEpoch and EndQuorumEpoch -------------------------------------------------


def begin_quorum_epoch_request(
    tp: TopicPartition,
    cluster_id: str,
    epoch: int,
    leader_id: int,
    leader_endpoints: Endpoints,
    voter_key: ReplicaKey,
) -> BeginQuorumEpochRequest:
    partition = {
        "leader_epoch": epoch,
        "leader_id": leader_id,
        "voter_directory_id": _directory(voter_key),
    }
    return _build(
        BeginQuorumEpochRequest,
        {
            "cluster_id": cluster_id,
            "voter_id": voter_key.id,
            "topics": _topic(tp, partition),
            "leader_endpoints": leader_endpoints.to_leader_endpoints(),
        },
    )


def _quorum_epoch_response(
    response_type: type[E],
    listener_name: str,
    tp: TopicPartition,
    partition_error: ErrorCode,
    epoch: int,
    leader_id: int,
    endpoints: Endpoints,
) -> E:
    partition = {"error_code": partition_error, "leader_id": leader_id, "leader_epoch": epoch}
    return _build(
        response_type,
        {
            "error_code": ErrorCode.none,
            "topics": _topic(tp, partition),
            "node_endpoints": endpoints.to_node_endpoints(leader_id, listener_name),
        },
    )


def begin_quorum_epoch_response(
    listener_name: str,
    tp: TopicPartition,
    partition_error: ErrorCode,
    epoch: int,
    leader_id: int,
    endpoints: Endpoints,
) -> BeginQuorumEpochResponse:
    return _quorum_epoch_response(
        BeginQuorumEpochResponse, listener_name, tp, partition_error, epoch, leader_id, endpoints
    )


def end_quorum_epoch_request(
    tp: TopicPartition,
    cluster_id: str,
    epoch: int,
    leader_id: int,
    preferred_successors: Sequence[ReplicaKey],
) -> EndQuorumEpochRequest:
    partition = {
        "leader_epoch": epoch,
        "leader_id": leader_id,
        "preferred_candidates": [
            {"candidate_id": key.id, "candidate_directory_id": _directory(key)}
            for key in preferred_successors
        ],
    }
    return _build(
        EndQuorumEpochRequest, {"cluster_id": cluster_id, "topics": _topic(tp, partition)}
    )


def end_quorum_epoch_response(
    listener_name: str,
    tp: TopicPartition,
    partition_error: ErrorCode,
    epoch: int,
    leader_id: int,
    endpoints: Endpoints,
) -> EndQuorumEpochResponse:
    return _quorum_epoch_response(
        EndQuorumEpochResponse, listener_name, tp, partition_error, epoch, leader_id, endpoints
    )


# -- Fetch -----------------------------------------------------------------------------


def fetch_request(
    tp: TopicPartition,
    topic_id: uuid.UUID,
    cluster_id: str,
    replica_id: int,
    replica_directory_id: uuid.UUID,
    current_leader_epoch: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    max_bytes: int,
    max_wait_ms: int,
    high_watermark: int,
) -> FetchRequest:
    partition = {
        "partition": tp.partition,
        "current_leader_epoch": current_leader_epoch,
        "fetch_offset": fetch_offset,
        "last_fetched_epoch": last_fetched_epoch,
        "log_start_offset": -1,
        "partition_max_bytes": max_bytes,
        "replica_directory_id": replica_directory_id,
        "high_watermark": high_watermark,
    }
    return _build(
        FetchRequest,
        {
            "cluster_id": cluster_id,
            "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
            "max_wait": max_wait_ms,
            "min_bytes": 0,
            "max_bytes": max_bytes,
            "session_epoch": -1,
            "topics": [{"topic_id": topic_id, "partitions": [partition]}],
        },
    )


def fetch_response(
    listener_name: str,
    tp: TopicPartition,
    topic_id: uuid.UUID,
    leader_id: int,
    endpoints: Endpoints,
    partition: Mapping[str, Any],
) -> FetchResponse:
    """A Fetch response for the partition; ``partition`` holds its fields (error,
    records, high watermark, current leader, diverging epoch or snapshot id)."""
    return _build(
        FetchResponse,
        {
            "error_code": ErrorCode.none,
            "responses": [
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": tp.partition, **partition}],
                }
            ],
            "node_endpoints": endpoints.to_node_endpoints(leader_id, listener_name),
        },
    )


# -- FetchSnapshot ---------------------------------------------------------------------


def fetch_snapshot_request(
    cluster_id: str,
    replica_key: ReplicaKey,
    tp: TopicPartition,
    epoch: int,
    snapshot_id: OffsetAndEpoch,
    max_bytes: int,
    position: int,
) -> FetchSnapshotRequest:
    partition = {
        "partition": tp.partition,
        "current_leader_epoch": epoch,
        "snapshot_id": {"end_offset": snapshot_id.offset, "epoch": snapshot_id.epoch},
        "position": position,
        "replica_directory_id": _directory(replica_key),
    }
    return _build(
        FetchSnapshotRequest,
        {
            "cluster_id": cluster_id,
            "replica_id": replica_key.id,
            "max_bytes": max_bytes,
            "topics": [{"name": tp.topic, "partitions": [partition]}],
        },
    )


def fetch_snapshot_response(
    listener_name: str,
    tp: TopicPartition,
    leader_id: int,
    endpoints: Endpoints,
    partition: Mapping[str, Any],
) -> FetchSnapshotResponse:
    return _build(
        FetchSnapshotResponse,
        {
            "error_code": ErrorCode.none,
            "topics": [{"name": tp.topic, "partitions": [{"index": tp.partition, **partition}]}],
            "node_endpoints": endpoints.to_node_endpoints(leader_id, listener_name),
        },
    )


# -- DescribeQuorum --------------------------------------------------------------------


def describe_quorum_error(tp: TopicPartition, error: ErrorCode) -> DescribeQuorumResponse:
    return _build(
        DescribeQuorumResponse,
        {"error_code": ErrorCode.none, "topics": _topic(tp, {"error_code": error})},
    )


def describe_quorum_response(
    tp: TopicPartition,
    leader_id: int,
    leader_epoch: int,
    high_watermark: int,
    voters: Iterable[ReplicaState],
    observers: Iterable[ReplicaState],
    now: int,
) -> DescribeQuorumResponse:
    """Kafka's RaftUtil.singletonDescribeQuorumResponse: the leader reports itself as
    fetched and caught up now."""
    voters = list(voters)

    def replica(state: ReplicaState) -> dict[str, Any]:
        is_leader = state.replica_key.id == leader_id
        return {
            "replica_id": state.replica_key.id,
            "replica_directory_id": state.replica_key.directory_id,
            "log_end_offset": -1 if state.end_offset is None else state.end_offset.message_offset,
            "last_fetch_timestamp": now if is_leader else state.last_fetch_timestamp,
            "last_caught_up_timestamp": now if is_leader else state.last_caught_up_timestamp,
        }

    partition = {
        "error_code": ErrorCode.none,
        "leader_id": leader_id,
        "leader_epoch": leader_epoch,
        "high_watermark": high_watermark,
        "current_voters": [replica(s) for s in voters],
        "observers": [replica(s) for s in observers],
    }
    nodes = [
        {"node_id": s.replica_key.id, "listeners": s.listeners.to_describe_quorum_listeners()}
        for s in voters
    ]
    return _build(
        DescribeQuorumResponse,
        {"error_code": ErrorCode.none, "topics": _topic(tp, partition), "nodes": nodes},
    )
