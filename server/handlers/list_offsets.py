"""ListOffsets (2): offsets by time — latest, earliest, max timestamp, or a timestamp.

The handler decodes and answers; each partition is resolved by
`ReplicaManager.fetch_offset_for_timestamp` (Kafka's ``KafkaApis.handleListOffsetRequest``
→ ``ReplicaManager.fetchOffset`` → ``Partition.fetchOffsetForTimestamp``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode, InvalidRequestError, TopicAuthorizationFailedError
from tiercel.protocol.list_offsets import DEBUGGING_REPLICA_ID, IsolationLevel
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import filter_by_authorized
from tiercel.server.fetch_offset import ListOffsetsResult
from tiercel.server.handlers.common import current_leader
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 2
MIN_VERSION: Final = 1
MAX_VERSION: Final = 11


def _isolation_level(request: Any) -> IsolationLevel | None:
    """None for a follower (it may see the log end); a client's level otherwise. The
    debugging replica id reads as a client does."""
    if request.replica_id >= 0:
        return None
    if getattr(request, "isolation_level", 0) == IsolationLevel.READ_COMMITTED:
        return IsolationLevel.READ_COMMITTED
    return IsolationLevel.READ_UNCOMMITTED


def _remote_timeout_ms(request: Any) -> tuple[int, ...]:
    """v10+ bounds remote-tier lookups itself (KIP-1075); older versions get the
    broker's remote.list.offsets.request.timeout.ms."""
    timeout = getattr(request, "timeout", None)
    return () if timeout is None else (int(timeout.total_seconds() * 1000),)


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    replica_manager = ctx.broker.replica_manager
    isolation_level = _isolation_level(request)
    fetch_only_from_leader = request.replica_id != DEBUGGING_REPLICA_ID
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen: set[TopicPartition] = set()
    # DESCRIBE on each topic, as Kafka's handleListOffsetRequest: the partitions of the
    # others fail with TOPIC_AUTHORIZATION_FAILED.
    described = filter_by_authorized(
        ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if topic.name not in described:
                result = ListOffsetsResult(TopicAuthorizationFailedError())
            elif tp in seen:
                result = ListOffsetsResult(InvalidRequestError(f"{tp} appears twice"))
            else:
                seen.add(tp)
                result = await replica_manager.fetch_offset_for_timestamp(
                    tp,
                    p.timestamp,
                    isolation_level,
                    getattr(p, "current_leader_epoch", -1),
                    fetch_only_from_leader,
                    ctx.api_version,
                    *_remote_timeout_ms(request),
                )
            error, found = result.error, result.found
            topics[topic.name].append(
                {
                    "partition_index": tp.partition,
                    "error_code": error.error_code if error else ErrorCode.none,
                    "timestamp": found.timestamp if found else -1,
                    "offset": found.offset if found else -1,
                    "leader_epoch": found.leader_epoch
                    if found and found.leader_epoch is not None
                    else -1,
                    "old_style_offsets": [],
                    "current_leader": current_leader(ctx, tp, error),
                }
            )
    return {
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
