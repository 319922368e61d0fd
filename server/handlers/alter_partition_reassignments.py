"""AlterPartitionReassignments (45): start, change or cancel partition reassignments.

Served by the active controller, as in Kafka's ZooKeeper mode; another broker answers
NOT_CONTROLLER at the top level (clients send this request to the controller Metadata
names). A partition with null replicas cancels its ongoing reassignment. The answer comes
once each reassignment has started, not when it completes: ListPartitionReassignments
shows it until then.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Final

from tiercel.protocol.errors import NotControllerError
from tiercel.server.controller.reassignment import Target
from tiercel.server.handlers.common import error_fields
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 45
MIN_VERSION: Final = 0
MAX_VERSION: Final = 0


def _targets(request: Any) -> dict[TopicPartition, Target]:
    # A partition named twice: the last entry wins, as in Kafka.
    return {
        TopicPartition(topic.name, partition.partition_index): (
            None if partition.replicas is None else tuple(partition.replicas)
        )
        for topic in request.topics
        for partition in topic.partitions
    }


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    try:
        # v0 has no allow_replication_factor_change (KIP-860): the factor may change.
        results = await ctx.controller.alter_partition_reassignments(
            _targets(request), allow_rf_change=True
        )
    except NotControllerError as e:
        return {"throttle_time": 0, **error_fields(e), "responses": []}
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, error in sorted(results.items()):
        by_topic[tp.topic].append(
            {
                "partition_index": tp.partition,
                **error_fields(error),
            }
        )
    return {
        "throttle_time": 0,
        **error_fields(None),
        "responses": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }
