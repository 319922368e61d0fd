"""Requests as a peer would send them to the client under test, and what it answers."""

from __future__ import annotations

import uuid
from typing import Any

from raft_client_context import CLUSTER_ID, ELECTION_TIMEOUT_MS, RaftClientTestContext

from tiercel.server.raft.endpoints import Endpoints
from tiercel.server.raft.kafka_metadata_log import METADATA_TOPIC_ID, METADATA_TOPIC_PARTITION
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.raft_message import InboundRequest
from tiercel.server.raft.raft_util import (
    begin_quorum_epoch_request,
    end_quorum_epoch_request,
    fetch_request,
    fetch_snapshot_request,
    vote_request,
)
from tiercel.server.raft.replica_key import ReplicaKey

TP = METADATA_TOPIC_PARTITION
# FetchRequest v18's default for the replica's high watermark: a replica that does not send
# it (KIP-1166), whose fetch is never behind the leader's.
NOT_SUPPORTED_HIGH_WATERMARK = 2**63 - 1


def vote(
    candidate: int,
    epoch: int,
    last_epoch: int,
    last_offset: int,
    voter: int,
    pre_vote: bool = False,
) -> Any:
    return vote_request(
        TP,
        CLUSTER_ID,
        epoch,
        ReplicaKey.of(candidate, None),
        ReplicaKey.of(voter, None),
        last_epoch,
        last_offset,
        pre_vote,
    )


def fetch(
    replica: int,
    epoch: int,
    offset: int,
    last_fetched_epoch: int,
    wait_ms: int = 0,
    high_watermark: int = NOT_SUPPORTED_HIGH_WATERMARK,
) -> Any:
    """A Fetch; ``high_watermark`` is the replica's (KIP-1166), by default that of a
    replica without the feature."""
    return fetch_request(
        TP,
        METADATA_TOPIC_ID,
        CLUSTER_ID,
        replica,
        uuid.UUID(int=0),
        epoch,
        offset,
        last_fetched_epoch,
        1 << 20,
        wait_ms,
        high_watermark,
    )


def fetch_snapshot(
    replica: int, epoch: int, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int
) -> Any:
    return fetch_snapshot_request(
        CLUSTER_ID, ReplicaKey.of(replica, None), TP, epoch, snapshot_id, max_bytes, position
    )


def begin_quorum_epoch(leader: int, epoch: int, voter: int, endpoints: Endpoints) -> Any:
    return begin_quorum_epoch_request(
        TP, CLUSTER_ID, epoch, leader, endpoints, ReplicaKey.of(voter, None)
    )


def end_quorum_epoch(leader: int, epoch: int, successors: list[int]) -> Any:
    return end_quorum_epoch_request(
        TP, CLUSTER_ID, epoch, leader, [ReplicaKey.of(s, None) for s in successors]
    )


def answer(request: InboundRequest) -> Any:
    """The response the client completed ``request`` with (AssertionError if none)."""
    got: list[Any] = []
    request.completion.when_complete(lambda value, error: got.append((value, error)))
    assert got, "no answer yet"
    value, error = got[0]
    assert error is None, error
    return value


def partition_of(response: Any) -> Any:
    if hasattr(response, "responses"):
        return response.responses[0].partitions[0]
    return response.topics[0].partitions[0]


async def become_leader(ctx: RaftClientTestContext) -> None:
    """Win a PreVote round, then a vote, with every other voter granting."""
    ctx.time.sleep(2 * ELECTION_TIMEOUT_MS)
    await ctx.poll()
    for pre_vote in (True, False):
        assert ctx.quorum.is_prospective if pre_vote else ctx.quorum.is_candidate
        await ctx.poll()
        for request in ctx.sent(52):
            ctx.deliver_response(request, ctx.vote_response(True, ctx.quorum.epoch))
        await ctx.poll_until_idle()
    assert ctx.quorum.is_leader
