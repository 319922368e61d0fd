"""ListOffsets (2): offsets by time — latest, earliest, max timestamp, or a timestamp."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Final

from tiercel.protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    NotLeaderOrFollowerError,
    UnsupportedVersionError,
)
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.handlers.common import current_leader
from tiercel.server.partition import Partition
from tiercel.server.request_context import RequestContext
from tiercel.storage.log_values import TimestampAndOffset
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 2
MIN_VERSION: Final = 1
MAX_VERSION: Final = 8

LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
MAX_TIMESTAMP: Final = -3
EARLIEST_LOCAL_TIMESTAMP: Final = -4
_MAX_TIMESTAMP_VERSION: Final = 7
_EARLIEST_LOCAL_VERSION: Final = 8
_DEBUGGING_REPLICA_ID: Final = -2


async def _lookup(
    ctx: RequestContext, partition: Partition, timestamp: int, replica_id: int
) -> TimestampAndOffset | None:
    log = partition.log
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        if timestamp == EARLIEST_LOCAL_TIMESTAMP and ctx.api_version < _EARLIEST_LOCAL_VERSION:
            raise UnsupportedVersionError("EARLIEST_LOCAL_TIMESTAMP needs ListOffsets v8")
        start = log.log_start_offset
        return TimestampAndOffset(-1, start, log.epoch_for_offset(start))
    if timestamp == LATEST_TIMESTAMP:
        # Replicas see the log end; consumers the high watermark (LSO when committed-only;
        # without transactions the two are the same).
        end = log.log_end_offset if replica_id >= 0 else log.high_watermark
        return TimestampAndOffset(-1, end, log.leader_epoch_cache.latest_epoch)
    if timestamp == MAX_TIMESTAMP:
        if ctx.api_version < _MAX_TIMESTAMP_VERSION:
            raise UnsupportedVersionError("MAX_TIMESTAMP needs ListOffsets v7")
        found = await log.fetch_max_timestamp()
    elif timestamp < 0:
        raise InvalidRequestError(f"invalid timestamp {timestamp}")
    else:
        found = await log.fetch_offset_by_timestamp(timestamp)
    if found is not None and replica_id < 0 and found.offset >= log.high_watermark:
        return None  # consumers only see offsets below the high watermark
    return found


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    replica_manager = ctx.broker.replica_manager
    replica_id = request.replica_id
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen: set[TopicPartition] = set()
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            error: KafkaError | None = None
            found: TimestampAndOffset | None = None
            try:
                if tp in seen:
                    raise InvalidRequestError(f"{tp} appears twice")
                seen.add(tp)
                partition = replica_manager.get_partition_or_error(tp)
                # The epoch first, as Kafka: a client behind or ahead of this broker's
                # epoch learns that (FENCED / UNKNOWN_LEADER_EPOCH) before leadership.
                partition.check_epoch(getattr(p, "current_leader_epoch", -1))
                if not partition.is_leader and replica_id != _DEBUGGING_REPLICA_ID:
                    raise NotLeaderOrFollowerError(f"this broker does not lead {tp}")
                found = await _lookup(ctx, partition, p.timestamp, replica_id)
            except Exception as e:
                error = as_kafka_error(e, "list_offsets")
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
