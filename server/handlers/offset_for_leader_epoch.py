"""OffsetForLeaderEpoch (23): the end offset of an epoch, from the epoch cache (Kafka's
``LeaderEpochFileCache.endOffsetFor``).

Followers ask it before truncating (KIP-101/279); consumers ask it to check that their
position is still on the leader's lineage after a leader change (KIP-320)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode, KafkaError, TopicAuthorizationFailedError
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, filter_by_authorized
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.replica_manager import ReplicaManager
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 23
MIN_VERSION: Final = 2
MAX_VERSION: Final = 4


def _authorized_topics(ctx: RequestContext, request: Any) -> set[str]:
    """Kafka's handleOffsetForLeaderEpochRequest: CLUSTER_ACTION on the cluster (a
    follower) covers every topic, else DESCRIBE on each."""
    names = [t.topic for t in request.topics]
    cluster = authorize(
        ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
    )
    if cluster:
        return set(names)
    return filter_by_authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    replica_manager = ctx.broker.replica_manager
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    authorized = _authorized_topics(ctx, request)
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.topic, p.partition)
            epoch, end_offset = -1, -1
            error: KafkaError | None = None
            if topic.topic not in authorized:
                error = TopicAuthorizationFailedError()
            else:
                epoch, end_offset, error = _end_offset(replica_manager, tp, p)
            topics[topic.topic].append(
                {
                    "error_code": error.error_code if error else ErrorCode.none,
                    "partition": tp.partition,
                    "leader_epoch": epoch,
                    "end_offset": end_offset,
                }
            )
    return {
        "throttle_time": 0,
        "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()],
    }


def _end_offset(
    replica_manager: ReplicaManager, tp: TopicPartition, p: Any
) -> tuple[int, int, KafkaError | None]:
    try:
        partition = replica_manager.get_partition_or_error(tp)
        epoch, end_offset = partition.last_offset_for_leader_epoch(
            p.current_leader_epoch, p.leader_epoch
        )
    except Exception as e:
        return -1, -1, as_kafka_error(e, "offset_for_leader_epoch")
    return epoch, end_offset, None
