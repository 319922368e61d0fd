"""OffsetCommit (8): store a group's consumed positions in __consumer_offsets.

Versions 2-4 may give the commits their own retention (``retention_time``); v10 names
topics by id. Unknown topics and partitions are answered per partition, the rest goes to
the group coordinator, which answers once the commit records are written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, filter_by_authorized
from tiercel.server.coordinator.group.offset_and_metadata import NO_METADATA, OffsetAndMetadata
from tiercel.server.handlers.common import timeout_ms
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 8
MIN_VERSION: Final = 2
MAX_VERSION: Final = 10

_RETENTION_VERSIONS: Final = range(2, 5)
_TOPIC_ID_VERSION: Final = 10
_DEFAULT_RETENTION: Final = -1


@dataclass(frozen=True, slots=True)
class _Refused:
    """What Kafka's handleOffsetCommitRequest refuses: the whole group (every partition
    GROUP_AUTHORIZATION_FAILED) or the named topics (TOPIC_AUTHORIZATION_FAILED)."""

    group: bool
    topics: frozenset[str]

    @property
    def error(self) -> ErrorCode:
        if self.group:
            return ErrorCode.group_authorization_failed
        return ErrorCode.topic_authorization_failed


def _refused_topics(ctx: RequestContext, request: Any, version: int) -> _Refused | None:
    """READ on the group, then READ on each topic; None when nothing is refused."""
    if ctx.authorizer is None:
        return None
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _Refused(True, frozenset())
    cache = ctx.broker.metadata_cache
    names = {
        cache.topic_name(t.topic_id) if version >= _TOPIC_ID_VERSION else t.name
        for t in request.topics
    }
    known = {n for n in names if n is not None}
    allowed = filter_by_authorized(ctx, AclOperation.READ, ResourceType.TOPIC, known)
    return _Refused(False, frozenset(known - allowed))


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    version = ctx.api_version
    now = int(time.time() * 1000)
    expire = None
    if version in _RETENTION_VERSIONS:
        retention = timeout_ms(request.retention_time)
        if retention != _DEFAULT_RETENTION:
            expire = now + retention
    cache = ctx.broker.metadata_cache
    # Response entries in request order: (topic key, partition) -> error.
    errors: dict[tuple[Any, int], ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    keys: dict[TopicPartition, tuple[Any, int]] = {}
    refused = _refused_topics(ctx, request, version)
    for topic in request.topics:
        if version >= _TOPIC_ID_VERSION:
            key, name = topic.topic_id, cache.topic_name(topic.topic_id)
            unknown = ErrorCode.unknown_topic_id
        else:
            key = name = topic.name
            unknown = ErrorCode.unknown_topic_or_partition
        metadata = None if name is None else cache.topic(name)
        for partition in topic.partitions:
            index = partition.partition_index
            if refused is not None and (refused.group or name in refused.topics):
                errors[key, index] = refused.error
                continue
            if metadata is None or name is None or index not in metadata.replicas:
                errors[key, index] = (
                    unknown if metadata is None else ErrorCode.unknown_topic_or_partition
                )
                continue
            tp = TopicPartition(name, index)
            keys[tp] = (key, index)
            errors[key, index] = ErrorCode.none
            offsets[tp] = OffsetAndMetadata(
                partition.committed_offset,
                getattr(partition, "committed_leader_epoch", -1),
                partition.committed_metadata or NO_METADATA,
                now,
                expire,
            )
    if offsets:
        results = await ctx.broker.group_coordinator.commit_offsets(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            request.generation_id_or_member_epoch,
            offsets,
            version,
        )
        for tp, error in results.items():
            errors[keys[tp]] = error
    by_topic: dict[Any, list[dict[str, Any]]] = {}
    for (key, index), error in errors.items():
        by_topic.setdefault(key, []).append({"partition_index": index, "error_code": error})
    topic_field = "topic_id" if version >= _TOPIC_ID_VERSION else "name"
    return {
        "throttle_time": 0,
        "topics": [
            {topic_field: key, "partitions": partitions} for key, partitions in by_topic.items()
        ],
    }
