"""TxnOffsetCommit (28): a transactional producer commits a group's offsets inside its
transaction (``send_offsets_to_transaction``); they become the group's committed
offsets only when the transaction commits (KIP-98; group membership checks of KIP-447
from v3). Unknown topics and partitions are answered per partition, the rest goes to
the group coordinator, which answers once the records are written.

v0-4: v5 belongs to transaction version 2 (KIP-890 part 2), which Tiercel does not
finalize.
"""

from __future__ import annotations

import time
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, filter_by_authorized
from tiercel.server.coordinator.group.group_results import UNKNOWN_MEMBER_ID
from tiercel.server.coordinator.group.offset_and_metadata import NO_METADATA, OffsetAndMetadata
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 28
MIN_VERSION: Final = 0
MAX_VERSION: Final = 4


def _refusal(ctx: RequestContext, request: Any) -> tuple[ErrorCode | None, set[str]]:
    """Kafka's handleTxnOffsetCommitRequest checks: WRITE on the transactional id, then
    READ on the group (either refused: every partition fails with that error), then READ
    on each topic. The whole request's error, and the topics refused."""
    txn_id = request.transactional_id
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return ErrorCode.transactional_id_authorization_failed, set()
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.group_authorization_failed, set()
    names = {t.name for t in request.topics}
    return None, names - filter_by_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, names)


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    now = int(time.time() * 1000)
    cache = ctx.broker.metadata_cache
    errors: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    refused, refused_topics = (None, set()) if ctx.authorizer is None else _refusal(ctx, request)
    for topic in request.topics:
        metadata = cache.topic(topic.name)
        for partition in topic.partitions:
            tp = TopicPartition(topic.name, partition.partition_index)
            if refused is not None or topic.name in refused_topics:
                errors[tp] = refused or ErrorCode.topic_authorization_failed
                continue
            if metadata is None or tp.partition not in metadata.replicas:
                errors[tp] = ErrorCode.unknown_topic_or_partition
                continue
            errors[tp] = ErrorCode.none
            offsets[tp] = OffsetAndMetadata(
                partition.committed_offset,
                getattr(partition, "committed_leader_epoch", -1),
                partition.committed_metadata or NO_METADATA,
                now,
                None,
            )
    if offsets:
        errors.update(
            await ctx.broker.group_coordinator.commit_transactional_offsets(
                request.transactional_id,
                request.group_id,
                request.producer_id,
                request.producer_epoch,
                getattr(request, "member_id", UNKNOWN_MEMBER_ID),
                getattr(request, "group_instance_id", None),
                getattr(request, "generation_id", -1),
                offsets,
            )
        )
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, error in errors.items():
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": error}
        )
    return {
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": ps} for name, ps in by_topic.items()],
    }
