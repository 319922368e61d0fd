"""DescribeTopicPartitions (75): partition leadership, paged by a cursor (KIP-966)."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorized_operations, filter_by_authorized
from tiercel.server.handlers.common import AUTHORIZED_OPERATIONS_OMITTED, INTERNAL_TOPICS
from tiercel.server.handlers.metadata import partitions_field
from tiercel.server.request_context import RequestContext

API_KEY: Final = 75
MIN_VERSION: Final = 0
MAX_VERSION: Final = 0


def _failed(name: str, error: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": error,
        "name": name,
        "topic_id": None,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    cache = ctx.broker.metadata_cache
    names = sorted({t.name for t in request.topics}) if request.topics else sorted(cache.topics)
    # DESCRIBE on each topic (Kafka's DescribeTopicPartitionsRequestHandler): the others
    # are left out of an all-topics answer, TOPIC_AUTHORIZATION_FAILED when named.
    described = filter_by_authorized(
        ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names, bool(request.topics)
    )
    if not request.topics:
        names = [n for n in names if n in described]
    cursor = request.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    budget = max(request.response_partition_limit, 1)
    topics: list[dict[str, Any]] = []
    next_cursor = None
    for name in names:
        topic = cache.topic(name) if name in described else None
        if topic is None:
            failed = (
                ErrorCode.unknown_topic_or_partition
                if name in described
                else ErrorCode.topic_authorization_failed
            )
            topics.append(_failed(name, failed))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        partitions = [p for p in partitions_field(cache, topic) if p["partition_index"] >= first]
        if len(partitions) > budget:
            next_cursor = {
                "topic_name": name,
                "partition_index": partitions[budget]["partition_index"],
            }
            partitions = partitions[:budget]
        budget -= len(partitions)
        for p in partitions:
            p["eligible_leader_replicas"] = []
            p["last_known_elr"] = []
        topics.append(
            {
                "error_code": ErrorCode.none,
                "name": name,
                "topic_id": topic.topic_id,
                "is_internal": name in INTERNAL_TOPICS,
                "partitions": partitions,
                "topic_authorized_operations": authorized_operations(ctx, ResourceType.TOPIC, name),
            }
        )
        if next_cursor is not None:
            break
        if budget == 0:
            later = names[names.index(name) + 1 :]
            if later:
                next_cursor = {"topic_name": later[0], "partition_index": 0}
            break
    return {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor}
