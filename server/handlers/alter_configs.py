"""AlterConfigs (33): replace a topic's config overrides (persisted in the store).

Dynamic broker configs are not supported: broker resources get INVALID_REQUEST."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from tiercel.protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.handlers.describe_configs import TOPIC_RESOURCE
from tiercel.server.request_context import RequestContext

API_KEY: Final = 33
MIN_VERSION: Final = 0
MAX_VERSION: Final = 2


def _check_topic_resource(ctx: RequestContext, resource_type: int, name: str) -> None:
    if resource_type != TOPIC_RESOURCE:
        raise InvalidRequestError(
            f"Only topic configs can be altered (resource type {TOPIC_RESOURCE}), "
            f"not resource type {resource_type}: dynamic broker configs are not supported"
        )
    if ctx.broker.metadata_cache.topic(name) is None:
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")


def _response_entry(resource: Any, error: KafkaError | None) -> dict[str, Any]:
    return {
        "error_code": error.error_code if error else ErrorCode.none,
        "error_message": error.message if error else None,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
    }


async def alter_topic_configs(
    ctx: RequestContext,
    request: Any,
    api_name: str,
    new_overrides: Callable[[Any], dict[str, str]],
) -> dict[str, Any]:
    """AlterConfigs and IncrementalAlterConfigs alike (Kafka's `ZkAdminManager.alterConfigs`
    and `incrementalAlterConfigs` both end in `alterTopicConfigs`): per topic resource,
    `new_overrides(resource)` gives the topic's whole new override map, which is validated
    against the current one (turning tiering off needs remote.log.delete.on.disable) and,
    unless `validate_only`, stored. Each resource fails alone."""
    admin = ctx.broker.admin_manager
    responses = []
    for resource in request.resources:
        error: KafkaError | None = None
        try:
            _check_topic_resource(ctx, resource.resource_type, resource.resource_name)
            topic = ctx.broker.metadata_cache.topic(resource.resource_name)
            existing = topic.config_overrides if topic is not None else {}
            overrides = admin.validated_overrides(new_overrides(resource), existing)
            if not request.validate_only:
                await admin.set_topic_config(resource.resource_name, overrides)
        except Exception as e:
            error = as_kafka_error(e, api_name)
        responses.append(_response_entry(resource, error))
    return {"throttle_time": 0, "responses": responses}


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    return await alter_topic_configs(
        ctx, request, "alter_configs", lambda resource: {c.name: c.value for c in resource.configs}
    )
