"""Vote (Kafka's KafkaRaftClient.handleVoteRequest/handleVoteResponse and
buildVoteRequest): standard votes of candidates and, since KIP-996, PreVotes of
prospectives, which bump no epoch and are never persisted.

A standard vote is granted when the replica has not voted for another in the epoch and
knows no leader in it, and the candidate's log is at least as up to date (its last
epoch, then offset, not below ours); the grant is durable before the answer leaves.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from kio.schema.vote.v2.request import VoteRequest
from kio.schema.vote.v2.response import VoteResponse

from tiercel.protocol.errors import ErrorCode
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.raft_message import InboundRequest, InboundResponse
from tiercel.server.raft.raft_util import (
    error_response,
    has_valid_topic_partition,
    vote_request,
    vote_response,
)
from tiercel.server.raft.replica_key import ReplicaKey

if TYPE_CHECKING:
    from tiercel.server.raft.kafka_raft_client import KafkaRaftClient

__all__ = ["VOTE", "build_vote_request", "handle_vote_request", "handle_vote_response"]

VOTE: Final = 52
_log: Final = logging.getLogger("tiercel.raft")


def build_vote_request(
    client: KafkaRaftClient[Any], voter_key: ReplicaKey, pre_vote: bool
) -> VoteRequest:
    """A candidate asks in its (new) epoch; a prospective in its current one."""
    end = client.end_offset()
    return vote_request(
        client.log.topic_partition,
        client.cluster_id,
        client.quorum.epoch,
        client.quorum.local_replica_key,
        voter_key,
        end.epoch,
        end.offset,
        pre_vote,
    )


def _response(
    client: KafkaRaftClient[Any], request: InboundRequest, error: ErrorCode, granted: bool
) -> VoteResponse:
    quorum = client.quorum
    return vote_response(
        request.listener_name,
        client.log.topic_partition,
        error,
        quorum.epoch,
        quorum.leader_id_or_sentinel,
        granted,
        quorum.leader_endpoints,
    )


async def handle_vote_request(
    client: KafkaRaftClient[Any], request: InboundRequest, now: int
) -> VoteResponse:
    data: VoteRequest = request.data
    if not client.has_valid_cluster_id(data.cluster_id):
        return error_response(VOTE, ErrorCode.inconsistent_cluster_id)  # type: ignore[no-any-return]
    if not has_valid_topic_partition(data.topics, client.log.topic_partition):
        return error_response(VOTE, ErrorCode.invalid_request)  # type: ignore[no-any-return]
    partition = data.topics[0].partitions[0]
    replica_epoch = partition.replica_epoch
    last_epoch, last_offset = partition.last_offset_epoch, partition.last_offset
    pre_vote = partition.pre_vote
    # A candidate bumped its epoch past every epoch in its log; a prospective did not.
    illegal_epoch = last_epoch > replica_epoch if pre_vote else last_epoch >= replica_epoch
    if last_offset < 0 or last_epoch < 0 or illegal_epoch:
        return _response(client, request, ErrorCode.invalid_request, False)
    error = client.validate_voter_only_request(partition.replica_id, replica_epoch)
    if error != ErrorCode.none:
        return _response(client, request, error, False)
    quorum = client.quorum
    if replica_epoch > quorum.epoch:
        await client.transition_to_unattached(replica_epoch)
    voter_key = (
        ReplicaKey.of(data.voter_id, partition.voter_directory_id) if data.voter_id >= 0 else None
    )
    if not client.is_valid_voter_key(voter_key):
        _log.info("vote request meant for %s, not this replica", voter_key)
        return _response(client, request, ErrorCode.invalid_voter_key, False)
    replica_key = ReplicaKey.of(partition.replica_id, partition.replica_directory_id)
    up_to_date = OffsetAndEpoch(last_offset, last_epoch) >= client.end_offset()
    granted = quorum.can_grant_vote(replica_key, up_to_date, pre_vote)
    if granted and not pre_vote:
        if quorum.is_unattached_not_voted:
            await quorum.unattached_add_voted_state(replica_epoch, replica_key)
        elif quorum.is_prospective_not_voted:
            await quorum.prospective_add_voted_state(replica_epoch, replica_key)
    _log.info(
        "%s of %s in epoch %d %s",
        "PreVote" if pre_vote else "vote",
        replica_key,
        replica_epoch,
        "granted" if granted else "rejected",
    )
    return _response(client, request, ErrorCode.none, granted)


async def handle_vote_response(
    client: KafkaRaftClient[Any], response: InboundResponse, now: int
) -> bool:
    data: VoteResponse = response.data
    if data.error_code != ErrorCode.none:
        return client.handle_top_level_error(data.error_code, response)
    if not has_valid_topic_partition(data.topics, client.log.topic_partition):
        return False
    partition = data.topics[0].partitions[0]
    leader_id = partition.leader_id if partition.leader_id >= 0 else None
    endpoints = client.leader_endpoints_from(leader_id, data.node_endpoints)
    error = partition.error_code
    handled = await client.maybe_handle_common_response(
        error, leader_id, partition.leader_epoch, endpoints, now
    )
    if handled is not None:
        return handled
    if error != ErrorCode.none:
        return client.handle_unexpected_error(error, response)
    quorum = client.quorum
    if quorum.is_nominee:
        state = quorum.nominee_state()
        if partition.vote_granted:
            state.record_granted_vote(response.source.id)
            await client.maybe_transition_forward(state, now)
        else:
            state.record_rejected_vote(response.source.id)
            await client.maybe_handle_election_loss(state, now)
    return True
