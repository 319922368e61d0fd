"""FindCoordinator (10): which broker coordinates a group, one key (v0-3) or a batch (v4+).

Any broker answers, from its metadata: the coordinator of a group is the leader of the
group's __consumer_offsets partition, COORDINATOR_NOT_AVAILABLE while that partition has
no live leader (the client retries, as after a failover). The first request for a group
creates __consumer_offsets (as Kafka does) and waits a little for its leaders.
The transaction coordinator of a transactional id (key type 1) is found the same way,
on __transaction_state (created by the first such request). Share coordinators (key
type 2) and unknown key types get INVALID_REQUEST.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.coordinator.group.group_config import GROUP_METADATA_TOPIC_NAME
from tiercel.server.coordinator.group.offsets_topic import ensure_offsets_topic
from tiercel.server.coordinator.transaction.transaction_config import (
    TRANSACTION_STATE_TOPIC_NAME,
)
from tiercel.server.coordinator.transaction.transaction_topic import ensure_transaction_topic
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 10
MIN_VERSION: Final = 0
MAX_VERSION: Final = 6

_FIRST_BATCHED_VERSION: Final = 4
_GROUP_KEY_TYPE: Final = 0
_TRANSACTION_KEY_TYPE: Final = 1
# How long a request waits for a coordinator topic to get its leaders after creating it.
OFFSETS_TOPIC_WAIT_MS: Final = 2000
_NO_NODE: Final = {"node_id": -1, "host": "", "port": -1}
# Kafka's Errors.message() of the errors this API answers with (v0-3 carry it).
_MESSAGES: Final = {
    ErrorCode.none: "NONE",
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
    ErrorCode.invalid_request: (
        "This most likely occurs because of a request being malformed by the client "
        "library or the message was sent to an incompatible broker. See the broker logs "
        "for more details."
    ),
}
_log: Final = logging.getLogger("tiercel.find_coordinator")


async def _group_coordinator(
    ctx: RequestContext, group_id: str
) -> tuple[ErrorCode, dict[str, Any]]:
    broker = ctx.broker
    coordinator = broker.group_coordinator
    config = coordinator.config

    def ensure() -> Awaitable[bool]:
        return ensure_offsets_topic(
            broker.admin_manager, broker.metadata_cache, config, OFFSETS_TOPIC_WAIT_MS / 1000
        )

    partition = coordinator.partition_for(group_id)
    return await _internal_topic_coordinator(
        ctx, GROUP_METADATA_TOPIC_NAME, ensure, partition, "offsets_topic_not_created"
    )


async def _transaction_coordinator(
    ctx: RequestContext, transactional_id: str
) -> tuple[ErrorCode, dict[str, Any]]:
    broker = ctx.broker
    coordinator = broker.transaction_coordinator
    config = coordinator.manager.config

    def ensure() -> Awaitable[bool]:
        return ensure_transaction_topic(
            broker.admin_manager, broker.metadata_cache, config, OFFSETS_TOPIC_WAIT_MS / 1000
        )

    partition = coordinator.partition_for(transactional_id)
    return await _internal_topic_coordinator(
        ctx, TRANSACTION_STATE_TOPIC_NAME, ensure, partition, "transaction_topic_not_created"
    )


async def _internal_topic_coordinator(
    ctx: RequestContext,
    topic: str,
    ensure_topic: Callable[[], Awaitable[bool]],
    partition: int,
    not_created_event: str,
) -> tuple[ErrorCode, dict[str, Any]]:
    """The leader of ``topic``'s ``partition`` (a coordinator's internal topic), created
    first by ``ensure_topic`` when the metadata has no such topic yet."""
    if ctx.broker.metadata_cache.topic(topic) is None:
        try:
            ready = await ensure_topic()
        except KafkaError as e:
            log_event(_log, logging.WARNING, not_created_event, reason=e.message)
            ready = False
        if not ready:
            return ErrorCode.coordinator_not_available, _NO_NODE
    return await _leader_of(ctx, TopicPartition(topic, partition))


async def _leader_of(ctx: RequestContext, tp: TopicPartition) -> tuple[ErrorCode, dict[str, Any]]:
    """The live leader of an internal topic's partition, as the coordinator's node."""
    cache = ctx.broker.metadata_cache
    if cache.partition_state(tp) is None:
        # Just created, here or by another broker: its first leader is on the way.
        await cache.wait_until(
            lambda c: c.partition_state(tp) is not None, OFFSETS_TOPIC_WAIT_MS / 1000
        )
    state = cache.partition_state(tp)
    registration = None if state is None else cache.brokers.get(state.leader)
    endpoint = None if registration is None else registration.endpoint(ctx.listener_name)
    if state is None or endpoint is None:
        return ErrorCode.coordinator_not_available, _NO_NODE
    return ErrorCode.none, {"node_id": state.leader, "host": endpoint.host, "port": endpoint.port}


async def _coordinator(
    ctx: RequestContext, key_type: int, key: str
) -> tuple[ErrorCode, dict[str, Any]]:
    # DESCRIBE on the group or transactional id, as Kafka's getCoordinator.
    if key_type == _GROUP_KEY_TYPE:
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return ErrorCode.group_authorization_failed, _NO_NODE
        return await _group_coordinator(ctx, key)
    if key_type == _TRANSACTION_KEY_TYPE:
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return ErrorCode.transactional_id_authorization_failed, _NO_NODE
        return await _transaction_coordinator(ctx, key)
    return ErrorCode.invalid_request, _NO_NODE


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    key_type = getattr(request, "key_type", _GROUP_KEY_TYPE)
    if ctx.api_version < _FIRST_BATCHED_VERSION:
        error, node = await _coordinator(ctx, key_type, request.key)
        return {"throttle_time": 0, "error_code": error, "error_message": _MESSAGES[error], **node}
    coordinators = []
    for key in request.coordinator_keys:
        error, node = await _coordinator(ctx, key_type, key)
        coordinators.append({"key": key, "error_code": error, "error_message": None, **node})
    return {"throttle_time": 0, "coordinators": coordinators}
