"""Metadata (3): brokers, controller and topic partitions, with auto-creation."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.admin_manager import NewTopic, validate_topic_name
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, authorized_operations
from tiercel.server.coordinator.group.group_config import GROUP_METADATA_TOPIC_NAME
from tiercel.server.coordinator.group.offsets_topic import ensure_offsets_topic
from tiercel.server.handlers.common import (
    AUTHORIZED_OPERATIONS_OMITTED,
    INTERNAL_TOPICS,
    alive_broker_nodes,
)
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 3
MIN_VERSION: Final = 0
MAX_VERSION: Final = 12

# How long a Metadata request waits for a topic it auto-created to get its leaders before
# answering LEADER_NOT_AVAILABLE (and letting the client retry), as Kafka would at once.
AUTO_CREATE_WAIT_MS: Final = 2000
_CLUSTER_OPERATIONS_VERSIONS: Final = range(8, 11)


def partitions_field(cache: MetadataCache, topic: TopicMetadata) -> list[dict[str, Any]]:
    alive = set(cache.brokers)
    partitions = []
    for index, replicas in sorted(topic.replicas.items()):
        state = topic.states.get(index)
        offline = cache.offline_replicas.get(TopicPartition(topic.name, index), frozenset())
        leader = state.leader if state is not None else -1
        partitions.append(
            {
                "error_code": ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available,
                "partition_index": index,
                "leader_id": leader,
                "leader_epoch": state.leader_epoch if state is not None else -1,
                "replica_nodes": list(replicas),
                "isr_nodes": list(state.isr) if state is not None else [],
                "offline_replicas": [r for r in replicas if r not in alive or r in offline],
            }
        )
    return partitions


def _topic_field(cache: MetadataCache, topic: TopicMetadata, operations: int) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": partitions_field(cache, topic),
        "topic_authorized_operations": operations,
    }


def _error_topic(
    name: str | None, code: ErrorCode, topic_id: uuid.UUID | None = None
) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id or uuid.UUID(int=0),
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


async def _auto_create(ctx: RequestContext, name: str) -> dict[str, Any] | None:
    """Create ``name`` with the broker defaults (__consumer_offsets with its own
    partition count and configs, as Kafka creates internal topics); None once it has
    leaders."""
    broker = ctx.broker
    if name == GROUP_METADATA_TOPIC_NAME:
        try:
            created = await ensure_offsets_topic(
                broker.admin_manager,
                broker.metadata_cache,
                broker.group_coordinator.config,
                AUTO_CREATE_WAIT_MS / 1000,
            )
        except KafkaError as e:
            return _error_topic(name, e.error_code)
        return None if created else _error_topic(name, ErrorCode.leader_not_available)
    try:
        validate_topic_name(name)
        planned = broker.admin_manager.plan_topic(NewTopic(name))
        await broker.admin_manager.create_topic(name, planned)
    except KafkaError as e:
        if e.error_code != ErrorCode.topic_already_exists:
            return _error_topic(name, e.error_code)
    created = await broker.metadata_cache.wait_until(
        lambda cache: (t := cache.topic(name)) is not None and t.has_leaders(),
        AUTO_CREATE_WAIT_MS / 1000,
    )
    return None if created else _error_topic(name, ErrorCode.leader_not_available)


def _may_describe(ctx: RequestContext, name: str, log_if_denied: bool = True) -> bool:
    return authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_if_denied)


def _may_create(ctx: RequestContext, name: str) -> bool:
    """Auto-creation needs CREATE on the cluster or on the topic (Kafka's
    handleTopicMetadataRequest)."""
    cluster = authorize(
        ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
    )
    return cluster or authorize(ctx, AclOperation.CREATE, ResourceType.TOPIC, name)


def _cluster_operations(ctx: RequestContext, request: Any) -> int:
    """v8-10's cluster_authorized_operations when asked for: 0 without DESCRIBE on the
    cluster (Kafka's handleTopicMetadataRequest)."""
    asked = getattr(request, "include_cluster_authorized_operations", False)
    if not asked or ctx.api_version not in _CLUSTER_OPERATIONS_VERSIONS:
        return AUTHORIZED_OPERATIONS_OMITTED
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)


async def _requested_topic(
    ctx: RequestContext, wanted: Any, auto_create: bool, operations: Callable[[str], int]
) -> dict[str, Any]:
    """The answer for one topic the request names (by name, or by id from v12)."""
    cache = ctx.broker.metadata_cache
    name = wanted.name
    topic_id = getattr(wanted, "topic_id", None)
    by_id = False
    if name is None and topic_id is not None:
        by_id = True
        name = cache.topic_name(topic_id)
        if name is None:
            return _error_topic(None, ErrorCode.unknown_topic_id, topic_id)
    if not _may_describe(ctx, name):
        failed = ErrorCode.topic_authorization_failed
        return _error_topic(None, failed, topic_id) if by_id else _error_topic(name, failed)
    topic = cache.topic(name)
    if topic is None and auto_create:
        if not _may_create(ctx, name):
            return _error_topic(name, ErrorCode.topic_authorization_failed)
        failure = await _auto_create(ctx, name)
        if failure is not None:
            return failure
        topic = cache.topic(name)
    if topic is not None:
        return _topic_field(cache, topic, operations(name))
    code = ErrorCode.unknown_topic_or_partition
    try:
        validate_topic_name(name)
    except KafkaError:
        code = ErrorCode.invalid_topic_exception
    return _error_topic(name, code)


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    """Topics the principal may not DESCRIBE are left out of an all-topics answer and
    answered TOPIC_AUTHORIZATION_FAILED when named (with their id when asked by id, which
    Kafka does not count as secret); auto-creation needs CREATE (`_may_create`)."""
    broker = ctx.broker
    cache = broker.metadata_cache
    version = ctx.api_version
    requested = request.topics
    if version == 0 and not requested:
        requested = None  # v0: an empty list means every topic
    include_ops = getattr(request, "include_topic_authorized_operations", False)

    def operations(name: str) -> int:
        if not include_ops:
            return AUTHORIZED_OPERATIONS_OMITTED
        return authorized_operations(ctx, ResourceType.TOPIC, name)

    auto_create = getattr(request, "allow_auto_topic_creation", True) and (
        broker.config.auto_create_topics_enable
    )
    topics: list[dict[str, Any]] = []
    if requested is None:
        topics = [
            _topic_field(cache, t, operations(name))
            for name, t in sorted(cache.topics.items())
            if _may_describe(ctx, name, log_if_denied=False)
        ]
    for wanted in requested or ():
        topics.append(await _requested_topic(ctx, wanted, auto_create, operations))
    return {
        "throttle_time": 0,
        "brokers": alive_broker_nodes(ctx, "node_id"),
        "cluster_id": cache.cluster_id,
        "controller_id": cache.controller_id,
        "topics": topics,
        "cluster_authorized_operations": _cluster_operations(ctx, request),
        "error_code": ErrorCode.none,
    }
