"""OffsetFetch (9): a group's committed offsets; several groups per request from v8.

``topics`` null (v2+) asks for every partition the group has an offset for. Errors of
the group (not coordinator, loading) are top-level from v2, per partition in v1. With
``require_stable`` (v7+, KIP-447) a partition whose offset a transaction has committed
but not yet ended answers UNSTABLE_OFFSET_COMMIT (the consumer retries), so that a
consumer taking over never starts from an offset that may still be aborted.
"""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, filter_by_authorized
from tiercel.server.coordinator.group.offset_and_metadata import (
    INVALID_OFFSET,
    NO_LEADER_EPOCH,
    NO_METADATA,
)
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 9
MIN_VERSION: Final = 1
MAX_VERSION: Final = 10

_TOP_LEVEL_ERROR_VERSION: Final = 2
_MULTI_GROUP_VERSION: Final = 8
_TOPIC_ID_VERSION: Final = 10


def _partition(index: int, offset: Any, error: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    return {
        "partition_index": index,
        "committed_offset": INVALID_OFFSET if offset is None else offset.committed_offset,
        "committed_leader_epoch": NO_LEADER_EPOCH if offset is None else offset.leader_epoch,
        "metadata": NO_METADATA if offset is None else offset.metadata,
        "error_code": error,
    }


def _by_topic(
    ctx: RequestContext,
    group_id: str,
    named: bool,
    offsets: dict[TopicPartition, Any],
    error: ErrorCode,
    require_stable: bool,
) -> dict[str, list[dict[str, Any]]]:
    """The partitions' entries by topic name. DESCRIBE on each topic: the offsets of the
    others are left out when every topic was asked for, refused with
    TOPIC_AUTHORIZATION_FAILED when ``named`` (Kafka's handleOffsetFetchRequest)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    pending = ctx.broker.group_coordinator.manager.txn_offsets
    described = filter_by_authorized(
        ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (tp.topic for tp in offsets), named
    )
    for tp, offset in offsets.items():
        if tp.topic not in described:
            if named:
                refused = _partition(tp.partition, None, ErrorCode.topic_authorization_failed)
                by_topic.setdefault(tp.topic, []).append(refused)
            continue
        partition_error = ErrorCode.none if ctx.api_version >= _TOP_LEVEL_ERROR_VERSION else error
        if require_stable and error is ErrorCode.none and pending.is_pending(group_id, tp):
            partition_error, offset = ErrorCode.unstable_offset_commit, None
        by_topic.setdefault(tp.topic, []).append(_partition(tp.partition, offset, partition_error))
    return by_topic


def _fetch_group(
    ctx: RequestContext,
    group_id: str,
    topics: Any,
    member_id: str | None = None,
    member_epoch: int = -1,
    require_stable: bool = False,
) -> dict[str, Any]:
    """One group's entry: group_id, error_code and topics (keyed "name" or "topic_id").
    From v9 a member of a consumer group names itself and its member epoch."""
    cache = ctx.broker.metadata_cache
    by_id = ctx.api_version >= _TOPIC_ID_VERSION
    field = "topic_id" if by_id else "name"
    wanted: list[TopicPartition] | None = None
    unknown_ids: list[tuple[Any, tuple[int, ...]]] = []
    if topics is not None:
        wanted = []
        for topic in topics:
            name = cache.topic_name(topic.topic_id) if by_id else topic.name
            if name is None:
                unknown_ids.append((topic.topic_id, tuple(topic.partition_indexes)))
                continue
            wanted.extend(TopicPartition(name, p) for p in topic.partition_indexes)
    # DESCRIBE on the group, as Kafka's handleOffsetFetchRequestFromCoordinator.
    if authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        error, offsets = ctx.broker.group_coordinator.fetch_offsets(
            group_id, wanted, member_id, member_epoch
        )
    else:
        error, offsets = ErrorCode.group_authorization_failed, {}
    if error is not ErrorCode.none:
        if ctx.api_version >= _TOP_LEVEL_ERROR_VERSION:
            return {"group_id": group_id, "error_code": error, "topics": []}
        # v1 has no top-level error: every requested partition carries it.
        offsets = dict.fromkeys(wanted or ())
    by_topic = _by_topic(ctx, group_id, topics is not None, offsets, error, require_stable)
    response_topics = []
    for name, partitions in by_topic.items():
        if by_id:
            topic = cache.topic(name)
            if topic is None:
                continue  # deleted since: it has no id to be named by
            response_topics.append({field: topic.topic_id, "partitions": partitions})
        else:
            response_topics.append({field: name, "partitions": partitions})
    for topic_id, indexes in unknown_ids:
        partitions = [_partition(p, None, ErrorCode.unknown_topic_id) for p in indexes]
        response_topics.append({field: topic_id, "partitions": partitions})
    return {"group_id": group_id, "error_code": ErrorCode.none, "topics": response_topics}


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.api_version < _MULTI_GROUP_VERSION:
        group = _fetch_group(
            ctx,
            request.group_id,
            request.topics,
            require_stable=getattr(request, "require_stable", False),
        )
        return {"throttle_time": 0, "error_code": group["error_code"], "topics": group["topics"]}
    groups = [
        _fetch_group(
            ctx,
            g.group_id,
            g.topics,
            getattr(g, "member_id", None),
            getattr(g, "member_epoch", -1),
            request.require_stable,
        )
        for g in request.groups
    ]
    return {"throttle_time": 0, "groups": groups}
