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
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
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


# Kafka's ConfigHelper.handleDescribeConfigsRequest: DESCRIBE_CONFIGS on the cluster for
# broker, broker logger and client metrics resources, on the topic or group otherwise;
# what a refused resource answers, with Errors' message.
_TOPIC_RESOURCE, _GROUP_RESOURCE = 2, 32
_REFUSALS: Final = {
    ResourceType.CLUSTER: (ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
    ResourceType.TOPIC: (ErrorCode.topic_authorization_failed, "Topic authorization failed."),
    ResourceType.GROUP: (ErrorCode.group_authorization_failed, "Group authorization failed."),
}


def _authorization(ctx: RequestContext, resource: Any) -> tuple[ErrorCode, str] | None:
    """The refusal of one resource, None when it may be described."""
    if resource.resource_type == _TOPIC_RESOURCE:
        acl_type, name = ResourceType.TOPIC, resource.resource_name
    elif resource.resource_type == _GROUP_RESOURCE:
        acl_type, name = ResourceType.GROUP, resource.resource_name
    else:
        acl_type, name = ResourceType.CLUSTER, CLUSTER_NAME
    if authorize(ctx, AclOperation.DESCRIBE_CONFIGS, acl_type, name):
        return None
    return _REFUSALS[acl_type]


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    synonyms = getattr(request, "include_synonyms", False)
    documentation = getattr(request, "include_documentation", False)
    results = []
    for resource in request.resources:
        refused = _authorization(ctx, resource)
        if refused is not None:
            results.append(
                {
                    "error_code": refused[0],
                    "error_message": refused[1],
                    "resource_type": resource.resource_type,
                    "resource_name": resource.resource_name,
                    "configs": [],
                }
            )
            continue
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
