"""DescribeConfigs (32): topic and broker configs with sources, synonyms and docs."""

from __future__ import annotations

from typing import Any, Final

from tiercel.config.log_config import ConfigEntry, describe_broker_configs, describe_topic_configs
from tiercel.protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.request_context import RequestContext

API_KEY: Final = 32
MIN_VERSION: Final = 1
MAX_VERSION: Final = 4

TOPIC_RESOURCE: Final = 2
BROKER_RESOURCE: Final = 4


def _entry(entry: ConfigEntry, synonyms: bool, documentation: bool) -> dict[str, Any]:
    return {
        "name": entry.name,
        "value": entry.value,
        "read_only": entry.read_only,
        "config_source": int(entry.source),
        "is_sensitive": entry.sensitive,
        "synonyms": [
            {"name": s.name, "value": s.value, "source": int(s.source)} for s in entry.synonyms
        ]
        if synonyms
        else [],
        "config_type": int(entry.config_type),
        "documentation": entry.documentation if documentation else None,
    }


def _entries(ctx: RequestContext, resource_type: int, name: str) -> list[ConfigEntry]:
    broker = ctx.broker
    if resource_type == TOPIC_RESOURCE:
        topic = broker.metadata_cache.topic(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        return describe_topic_configs(broker.config, topic.config_overrides)
    if resource_type == BROKER_RESOURCE:
        if name not in ("", str(broker.node_id)):
            raise InvalidRequestError(
                f"Unexpected broker id, expected {broker.node_id} or "
                f"empty string, but received {name}"
            )
        return describe_broker_configs(broker.config)
    raise InvalidRequestError(f"Unsupported resource type {resource_type}")


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    synonyms = getattr(request, "include_synonyms", False)
    documentation = getattr(request, "include_documentation", False)
    results = []
    for resource in request.resources:
        error: KafkaError | None = None
        configs: list[dict[str, Any]] = []
        try:
            wanted = resource.configuration_keys
            for entry in _entries(ctx, resource.resource_type, resource.resource_name):
                if wanted is None or entry.name in wanted:
                    configs.append(_entry(entry, synonyms, documentation))
        except Exception as e:
            error = as_kafka_error(e, "describe_configs")
        results.append(
            {
                "error_code": error.error_code if error else ErrorCode.none,
                "error_message": error.message if error else None,
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
                "configs": configs,
            }
        )
    return {"throttle_time": 0, "results": results}
