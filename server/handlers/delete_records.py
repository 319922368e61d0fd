"""DeleteRecords (21): advance partitions' log start offsets (their low watermarks).

The handler decodes and answers; `ReplicaManager.delete_records` moves each leader's log
start offset and waits, up to the request's timeout_ms, until every live replica has
followed (Kafka's ``KafkaApis.handleDeleteRecordsRequest`` → ``ReplicaManager.deleteRecords``
→ ``DelayedDeleteRecords``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import filter_by_authorized
from tiercel.server.handlers.common import timeout_ms
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 21
MIN_VERSION: Final = 0
MAX_VERSION: Final = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # A partition named twice is asked once, with its last offset (Kafka builds a map).
    offsets = {
        TopicPartition(topic.name, p.partition_index): p.offset
        for topic in request.topics
        for p in topic.partitions
    }
    # DELETE on each topic (Kafka's handleDeleteRecordsRequest).
    allowed = filter_by_authorized(
        ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    results = await ctx.broker.replica_manager.delete_records(
        timeout_ms(request.timeout), {tp: o for tp, o in offsets.items() if tp.topic in allowed}
    )
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp in offsets:
        if tp.topic not in allowed:
            topics[tp.topic].append(
                {
                    "partition_index": tp.partition,
                    "low_watermark": -1,
                    "error_code": ErrorCode.topic_authorization_failed,
                }
            )
    for tp, status in results.items():
        topics[tp.topic].append(
            {
                "partition_index": tp.partition,
                "low_watermark": status.low_watermark,
                "error_code": status.error.error_code if status.error else ErrorCode.none,
            }
        )
    return {
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
