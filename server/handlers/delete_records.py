"""DeleteRecords (21): advance partitions' log start offsets (their low watermarks)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 21
MIN_VERSION: Final = 0
MAX_VERSION: Final = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    replica_manager = ctx.broker.replica_manager
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            low_watermark = -1
            error: KafkaError | None = None
            try:
                partition = replica_manager.get_partition_or_error(tp)
                low_watermark = partition.delete_records_on_leader(p.offset)
            except Exception as e:
                error = as_kafka_error(e, "delete_records")
            topics[topic.name].append(
                {
                    "partition_index": tp.partition,
                    "low_watermark": low_watermark,
                    "error_code": error.error_code if error else ErrorCode.none,
                }
            )
    return {
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
