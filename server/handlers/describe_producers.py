"""DescribeProducers (61): the idempotent producers a partition's state holds.

As Kafka: an illegal topic name is INVALID_TOPIC_EXCEPTION and a topic the metadata does
not know UNKNOWN_TOPIC_OR_PARTITION for each requested partition; otherwise any replica
hosting the partition answers (leadership is not required) with every producer id it
tracks: epoch, last sequence, last timestamp, coordinator epoch, transaction start.
"""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import (
    KafkaError,
    NotLeaderOrFollowerError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from tiercel.server.admin_manager import validate_topic_name
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.handlers.common import error_fields
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 61
MIN_VERSION: Final = 0
MAX_VERSION: Final = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    topics = []
    for topic in request.topics:
        topic_error = _topic_error(ctx, topic.name)
        partitions = [
            _partition(ctx, TopicPartition(topic.name, index), topic_error)
            for index in topic.partition_indexes
        ]
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


def _topic_error(ctx: RequestContext, name: str) -> KafkaError | None:
    # READ on the topic first (Kafka's handleDescribeProducersRequest).
    if not authorize(ctx, AclOperation.READ, ResourceType.TOPIC, name):
        return TopicAuthorizationFailedError()
    try:
        validate_topic_name(name)
    except KafkaError as e:
        return e
    if ctx.broker.metadata_cache.topic(name) is None:
        return UnknownTopicOrPartitionError(f"topic {name} does not exist")
    return None


def _partition(ctx: RequestContext, tp: TopicPartition, error: KafkaError | None) -> dict[str, Any]:
    producers: list[dict[str, Any]] = []
    if error is None:
        try:
            if (
                tp not in ctx.broker.replica_manager.partitions
                and ctx.broker.metadata_cache.partition_state(tp) is not None
            ):
                # Kafka's answer for a partition that exists but is not hosted here.
                raise NotLeaderOrFollowerError(f"this broker does not host {tp}")
            partition = ctx.broker.replica_manager.get_partition_or_error(tp)
            state = partition.log.producer_state
            producers = [
                {
                    "producer_id": producer_id,
                    "producer_epoch": entry.producer_epoch,
                    "last_sequence": entry.last_seq,
                    "last_timestamp": entry.last_timestamp,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": (
                        -1
                        if entry.current_txn_first_offset is None
                        else entry.current_txn_first_offset
                    ),
                }
                for producer_id, entry in sorted(state.active_producers.items())
            ]
        except Exception as e:
            error = as_kafka_error(e, f"describe producers of {tp}")
    return {
        "partition_index": tp.partition,
        **error_fields(error),
        "active_producers": producers,
    }
