"""BeginQuorumEpoch and EndQuorumEpoch (Kafka's KafkaRaftClient handlers of the same
names).

A new leader announces itself with BeginQuorumEpoch, to every voter, every half fetch
timeout: Kafka's Raft is driven by followers' fetches, so voters must learn where to
fetch. A resigning leader sends EndQuorumEpoch naming its preferred successors (voters by
descending fetch offset); a voter then starts its election after a backoff that grows
with its rank, so the most up-to-date one usually wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from kio.schema.begin_quorum_epoch.v1.request import BeginQuorumEpochRequest
from kio.schema.begin_quorum_epoch.v1.response import BeginQuorumEpochResponse
from kio.schema.end_quorum_epoch.v1.request import EndQuorumEpochRequest
from kio.schema.end_quorum_epoch.v1.response import EndQuorumEpochResponse

from tiercel.protocol.errors import ErrorCode
from tiercel.server.raft.endpoints import Endpoints
from tiercel.server.raft.leader_state import LeaderState
from tiercel.server.raft.raft_message import InboundRequest, InboundResponse
from tiercel.server.raft.raft_util import (
    begin_quorum_epoch_request,
    begin_quorum_epoch_response,
    end_quorum_epoch_request,
    end_quorum_epoch_response,
    error_response,
    has_valid_topic_partition,
)
from tiercel.server.raft.replica_key import ReplicaKey

if TYPE_CHECKING:
    from tiercel.server.raft.kafka_raft_client import KafkaRaftClient

__all__ = [
    "BEGIN_QUORUM_EPOCH",
    "END_QUORUM_EPOCH",
    "build_begin_quorum_epoch_request",
    "build_end_quorum_epoch_request",
    "handle_begin_quorum_epoch_request",
    "handle_begin_quorum_epoch_response",
    "handle_end_quorum_epoch_request",
    "handle_end_quorum_epoch_response",
    "strict_exponential_election_backoff_ms",
]

BEGIN_QUORUM_EPOCH: Final = 53
END_QUORUM_EPOCH: Final = 54


def build_begin_quorum_epoch_request(
    client: KafkaRaftClient[Any], voter_key: ReplicaKey
) -> BeginQuorumEpochRequest:
    quorum = client.quorum
    return begin_quorum_epoch_request(
        client.log.topic_partition,
        client.cluster_id,
        quorum.epoch,
        quorum.local_replica_key.id,
        quorum.leader_endpoints,
        voter_key,
    )


def build_end_quorum_epoch_request(
    client: KafkaRaftClient[Any], preferred_successors: Sequence[ReplicaKey]
) -> EndQuorumEpochRequest:
    quorum = client.quorum
    return end_quorum_epoch_request(
        client.log.topic_partition,
        client.cluster_id,
        quorum.epoch,
        quorum.local_replica_key.id,
        preferred_successors,
    )


def _request_leader_endpoints(
    client: KafkaRaftClient[Any], leader_id: int, leader_endpoints: Sequence[Any]
) -> Endpoints:
    if leader_endpoints:
        return Endpoints.from_leader_endpoints(leader_endpoints)
    return client.voters.listeners(leader_id)


async def handle_begin_quorum_epoch_request(
    client: KafkaRaftClient[Any], request: InboundRequest, now: int
) -> BeginQuorumEpochResponse:
    data: BeginQuorumEpochRequest = request.data
    tp = client.log.topic_partition
    if not client.has_valid_cluster_id(data.cluster_id):
        return error_response(BEGIN_QUORUM_EPOCH, ErrorCode.inconsistent_cluster_id)  # type: ignore[no-any-return]
    if not has_valid_topic_partition(data.topics, tp):
        return error_response(BEGIN_QUORUM_EPOCH, ErrorCode.invalid_request)  # type: ignore[no-any-return]
    partition = data.topics[0].partitions[0]

    def respond(error: ErrorCode) -> BeginQuorumEpochResponse:
        quorum = client.quorum
        return begin_quorum_epoch_response(
            request.listener_name,
            tp,
            error,
            quorum.epoch,
            quorum.leader_id_or_sentinel,
            quorum.leader_endpoints,
        )

    error = client.validate_voter_only_request(partition.leader_id, partition.leader_epoch)
    if error != ErrorCode.none:
        return respond(error)
    endpoints = _request_leader_endpoints(client, partition.leader_id, data.leader_endpoints)
    await client.maybe_transition(partition.leader_id, partition.leader_epoch, endpoints, now)
    voter_key = (
        ReplicaKey.of(data.voter_id, partition.voter_directory_id) if data.voter_id >= 0 else None
    )
    if not client.is_valid_voter_key(voter_key):
        return respond(ErrorCode.invalid_voter_key)
    return respond(ErrorCode.none)


async def handle_begin_quorum_epoch_response(
    client: KafkaRaftClient[Any], response: InboundResponse, now: int
) -> bool:
    data: BeginQuorumEpochResponse = response.data
    if data.error_code != ErrorCode.none:
        return client.handle_top_level_error(data.error_code, response)
    if not has_valid_topic_partition(data.topics, client.log.topic_partition):
        return False
    partition = data.topics[0].partitions[0]
    leader_id = partition.leader_id if partition.leader_id >= 0 else None
    endpoints = client.leader_endpoints_from(leader_id, data.node_endpoints)
    handled = await client.maybe_handle_common_response(
        partition.error_code, leader_id, partition.leader_epoch, endpoints, now
    )
    if handled is not None:
        return handled
    if partition.error_code != ErrorCode.none:
        return client.handle_unexpected_error(partition.error_code, response)
    state: LeaderState[Any] | None = client.quorum.maybe_leader_state()
    if state is not None:
        state.add_acknowledgement_from(response.source.id)
    return True


async def handle_end_quorum_epoch_request(
    client: KafkaRaftClient[Any], request: InboundRequest, now: int
) -> EndQuorumEpochResponse:
    data: EndQuorumEpochRequest = request.data
    tp = client.log.topic_partition
    if not client.has_valid_cluster_id(data.cluster_id):
        return error_response(END_QUORUM_EPOCH, ErrorCode.inconsistent_cluster_id)  # type: ignore[no-any-return]
    if not has_valid_topic_partition(data.topics, tp):
        return error_response(END_QUORUM_EPOCH, ErrorCode.invalid_request)  # type: ignore[no-any-return]
    partition = data.topics[0].partitions[0]

    def respond(error: ErrorCode) -> EndQuorumEpochResponse:
        quorum = client.quorum
        return end_quorum_epoch_response(
            request.listener_name,
            tp,
            error,
            quorum.epoch,
            quorum.leader_id_or_sentinel,
            quorum.leader_endpoints,
        )

    error = client.validate_voter_only_request(partition.leader_id, partition.leader_epoch)
    if error != ErrorCode.none:
        return respond(error)
    endpoints = _request_leader_endpoints(client, partition.leader_id, data.leader_endpoints)
    await client.maybe_transition(partition.leader_id, partition.leader_epoch, endpoints, now)
    quorum = client.quorum
    if quorum.is_follower and quorum.follower_state().leader_id == partition.leader_id:
        preferred = [
            ReplicaKey.of(c.candidate_id, c.candidate_directory_id)
            for c in partition.preferred_candidates
        ]
        backoff = _end_epoch_election_backoff(client, preferred)
        quorum.follower_state().override_fetch_timeout(now, backoff)
    return respond(ErrorCode.none)


def _end_epoch_election_backoff(
    client: KafkaRaftClient[Any], preferred_candidates: Sequence[ReplicaKey]
) -> int:
    """Rank 0 (the most caught-up voter) starts at once; others wait longer the lower
    their rank; a voter not named waits the longest (Kafka's endEpochElectionBackoff)."""
    position = 0
    local = client.quorum.local_replica_key
    for candidate in preferred_candidates:
        if candidate.id == local.id and (
            candidate.directory_id is None or candidate.directory_id == local.directory_id
        ):
            break
        position += 1
    return strict_exponential_election_backoff_ms(
        position, len(preferred_candidates), client.config.election_backoff_max_ms
    )


def strict_exponential_election_backoff_ms(
    position: int, total: int, election_backoff_max_ms: int
) -> int:
    if position == 0:
        return 0
    if position < 0 or position >= total:
        return election_backoff_max_ms
    base = election_backoff_max_ms >> (total - 1)
    return min(election_backoff_max_ms, base << (position - 1))


async def handle_end_quorum_epoch_response(
    client: KafkaRaftClient[Any], response: InboundResponse, now: int
) -> bool:
    data: EndQuorumEpochResponse = response.data
    if data.error_code != ErrorCode.none:
        return client.handle_top_level_error(data.error_code, response)
    if not has_valid_topic_partition(data.topics, client.log.topic_partition):
        return False
    partition = data.topics[0].partitions[0]
    leader_id = partition.leader_id if partition.leader_id >= 0 else None
    endpoints = client.leader_endpoints_from(leader_id, data.node_endpoints)
    handled = await client.maybe_handle_common_response(
        partition.error_code, leader_id, partition.leader_epoch, endpoints, now
    )
    if handled is not None:
        return handled
    if partition.error_code != ErrorCode.none:
        return client.handle_unexpected_error(partition.error_code, response)
    if client.quorum.is_resigned:
        client.quorum.resigned_state().acknowledge_resignation(response.source.id)
    return True
