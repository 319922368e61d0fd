"""DescribeQuorum (KIP-595, v2 with KIP-853's directory ids and listeners; Kafka's
KafkaRaftClient.handleDescribeQuorumRequest): the leader's view of every voter's and
observer's progress, what ``kafka-metadata-quorum describe`` prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from kio.schema.describe_quorum.v2.response import DescribeQuorumResponse

from tiercel.protocol.errors import ErrorCode
from tiercel.server.raft.leader_state import LeaderState
from tiercel.server.raft.raft_message import InboundRequest
from tiercel.server.raft.raft_util import (
    describe_quorum_error,
    describe_quorum_response,
    has_valid_topic_partition,
)

if TYPE_CHECKING:
    from tiercel.server.raft.kafka_raft_client import KafkaRaftClient

__all__ = ["DESCRIBE_QUORUM", "handle_describe_quorum_request"]

DESCRIBE_QUORUM: Final = 55


async def handle_describe_quorum_request(
    client: KafkaRaftClient[Any], request: InboundRequest, now: int
) -> DescribeQuorumResponse:
    data: DescribeQuorumRequest = request.data
    tp = client.log.topic_partition
    if not has_valid_topic_partition(data.topics, tp):
        return describe_quorum_error(tp, ErrorCode.unknown_topic_or_partition)
    quorum = client.quorum
    state: LeaderState[Any] | None = quorum.maybe_leader_state()
    if state is None:
        return describe_quorum_error(tp, ErrorCode.not_leader_or_follower)
    high_watermark = state.high_watermark
    return describe_quorum_response(
        tp,
        state.local_key.id,
        state.epoch,
        -1 if high_watermark is None else high_watermark.message_offset,
        state.voter_states.values(),
        state.observer_states(now).values(),
        now,
    )
