"""OffsetForLeaderEpoch (23): the end offset of an epoch, from the epoch cache (Kafka's
``LeaderEpochFileCache.endOffsetFor``).

Followers ask it before truncating (KIP-101/279); consumers ask it to check that their
position is still on the leader's lineage after a leader change (KIP-320)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 23
MIN_VERSION: Final = 2
MAX_VERSION: Final = 4


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    replica_manager = ctx.broker.replica_manager
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.topic, p.partition)
            epoch, end_offset = -1, -1
            error: KafkaError | None = None
            try:
                partition = replica_manager.get_partition_or_error(tp)
                epoch, end_offset = partition.last_offset_for_leader_epoch(
                    p.current_leader_epoch, p.leader_epoch
                )
            except Exception as e:
                error = as_kafka_error(e, "offset_for_leader_epoch")
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
