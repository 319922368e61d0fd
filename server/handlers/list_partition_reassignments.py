"""ListPartitionReassignments (46): the ongoing reassignments, with their full replica
set and the replicas being added and removed (KIP-455).

Served by the active controller, as in Kafka's ZooKeeper mode; another broker answers
NOT_CONTROLLER at the top level. Null topics list every ongoing reassignment; named
partitions that are not being reassigned (or do not exist) are left out of the answer.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Final

from tiercel.protocol.errors import NotControllerError
from tiercel.server.handlers.common import error_fields
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 46
MIN_VERSION: Final = 0
MAX_VERSION: Final = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    partitions = (
        None
        if request.topics is None
        else {
            TopicPartition(topic.name, index)
            for topic in request.topics
            for index in topic.partition_indexes
        }
    )
    try:
        ongoing = await ctx.controller.list_partition_reassignments(partitions)
    except NotControllerError as e:
        return {"throttle_time": 0, **error_fields(e), "topics": []}
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, assignment in sorted(ongoing.items()):
        by_topic[tp.topic].append(
            {
                "partition_index": tp.partition,
                "replicas": list(assignment.replicas),
                "adding_replicas": list(assignment.adding),
                "removing_replicas": list(assignment.removing),
            }
        )
    return {
        "throttle_time": 0,
        **error_fields(None),
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }
