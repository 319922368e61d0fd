"""Pieces several handlers share: error fields, leader hints, waiting for metadata."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.metadata.metadata_cache import Condition
from tiercel.server.replica_manager import INTERNAL_TOPICS as INTERNAL_TOPICS
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

# Kafka's "not requested" value for authorized-operations fields.
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
# Leader hints (KIP-951) are sent with these errors.
_LEADER_HINT_ERRORS: Final = frozenset(
    {ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch}
)


def error_fields(error: KafkaError | None) -> dict[str, Any]:
    if error is None:
        return {"error_code": ErrorCode.none, "error_message": None}
    return {"error_code": error.error_code, "error_message": error.message}


def current_leader(
    ctx: RequestContext, tp: TopicPartition, error: KafkaError | None
) -> dict[str, int]:
    """The leader and epoch the metadata cache knows, for NOT_LEADER_OR_FOLLOWER answers."""
    state = ctx.broker.metadata_cache.partition_state(tp)
    if error is None or error.error_code not in _LEADER_HINT_ERRORS or state is None:
        return {"leader_id": -1, "leader_epoch": -1}
    return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}


def node_endpoints(ctx: RequestContext, leader_ids: set[int]) -> list[dict[str, Any]]:
    """Endpoints of the brokers named in leader hints, on the client's listener."""
    endpoints = []
    for broker_id in sorted(leader_ids):
        broker = ctx.broker.metadata_cache.brokers.get(broker_id)
        endpoint = broker.endpoint(ctx.listener_name) if broker else None
        if broker is not None and endpoint is not None:
            endpoints.append(
                {
                    "node_id": broker_id,
                    "host": endpoint.host,
                    "port": endpoint.port,
                    "rack": broker.rack,
                }
            )
    return endpoints


def timeout_ms(value: Any) -> int:
    """kio decodes *_ms durations as timedeltas."""
    return int(value.total_seconds() * 1000)


async def wait_for_metadata(ctx: RequestContext, condition: Condition, timeout: int) -> bool:
    return await ctx.broker.metadata_cache.wait_until(condition, max(timeout, 0) / 1000)


def alive_broker_nodes(ctx: RequestContext, id_field: str) -> list[dict[str, Any]]:
    """The brokers with an endpoint on the request's listener, by id (Kafka's
    `MetadataCache.getAliveBrokerNodes(listenerName)`), as response entries whose id field
    is named `id_field` (Metadata's `node_id`, DescribeCluster's `broker_id`)."""
    brokers = []
    for broker_id, broker in sorted(ctx.broker.metadata_cache.brokers.items()):
        endpoint = broker.endpoint(ctx.listener_name)
        if endpoint is not None:
            brokers.append(
                {
                    id_field: broker_id,
                    "host": endpoint.host,
                    "port": endpoint.port,
                    "rack": broker.rack,
                }
            )
    return brokers
