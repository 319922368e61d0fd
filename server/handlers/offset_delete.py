"""OffsetDelete (47): delete a group's committed offsets of some partitions.

An Empty group may lose any offset; a consumer group in use only those of topics none
of its members subscribes to (GROUP_SUBSCRIBED_TO_TOPIC otherwise). A group-level error
is the whole answer.
"""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, filter_by_authorized
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 47
MIN_VERSION: Final = 0
MAX_VERSION: Final = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    cache = ctx.broker.metadata_cache
    # DELETE on the group, then READ on each topic, as Kafka's handleOffsetDeleteRequest.
    if not authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return {
            "error_code": ErrorCode.group_authorization_failed,
            "throttle_time": 0,
            "topics": [],
        }
    readable = filter_by_authorized(
        ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    errors: dict[TopicPartition, ErrorCode] = {}
    partitions: list[TopicPartition] = []
    for topic in request.topics:
        metadata = cache.topic(topic.name)
        for partition in topic.partitions:
            tp = TopicPartition(topic.name, partition.partition_index)
            if topic.name not in readable:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif metadata is None or tp.partition not in metadata.replicas:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                partitions.append(tp)
    error, results = await ctx.broker.group_coordinator.delete_offsets(request.group_id, partitions)
    if error is not ErrorCode.none:
        return {"error_code": error, "throttle_time": 0, "topics": []}
    errors.update(results)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, partition_error in errors.items():
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": partition_error}
        )
    return {
        "error_code": ErrorCode.none,
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }
