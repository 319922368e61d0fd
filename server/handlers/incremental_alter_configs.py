"""IncrementalAlterConfigs (44): SET / DELETE / APPEND / SUBTRACT on topic overrides."""

from __future__ import annotations

from typing import Any, Final

from tiercel.config.config_def import ConfigType
from tiercel.config.topic_configs import TOPIC_CONFIGS
from tiercel.protocol.errors import InvalidConfigError, InvalidRequestError
from tiercel.server.handlers.alter_configs import alter_topic_configs
from tiercel.server.request_context import RequestContext

API_KEY: Final = 44
MIN_VERSION: Final = 0
MAX_VERSION: Final = 1

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _apply(overrides: dict[str, str], configs: Any) -> dict[str, str]:
    result = dict(overrides)
    names = [c.name for c in configs]
    for config in configs:
        if names.count(config.name) > 1:
            raise InvalidRequestError(f"Duplicate config key {config.name}")
        op, name, value = config.config_operation, config.name, config.value
        if op == SET:
            if value is None:
                raise InvalidConfigError(f"Null value not supported for: {name}")
            result[name] = value
        elif op == DELETE:
            result.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            definition = TOPIC_CONFIGS.get(name)
            if definition is None or definition.type is not ConfigType.LIST:
                raise InvalidConfigError(
                    f"Config value append/subtract is not allowed for "
                    f"config key {name}, which is not a list"
                )
            current = [v for v in result.get(name, _default_list(name)).split(",") if v]
            items = [v for v in (value or "").split(",") if v]
            if op == APPEND:
                current += [v for v in items if v not in current]
            else:
                current = [v for v in current if v not in items]
            result[name] = ",".join(current)
        else:
            raise InvalidRequestError(f"Unknown config operation {op}")
    return result


def _default_list(name: str) -> str:
    default = TOPIC_CONFIGS[name].default
    return ",".join(default) if isinstance(default, list | tuple) else str(default or "")


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    cache = ctx.broker.metadata_cache

    def new_overrides(resource: Any) -> dict[str, str]:
        topic = cache.topic(resource.resource_name)
        current = topic.config_overrides if topic is not None else {}
        return _apply(current, resource.configs)

    return await alter_topic_configs(ctx, request, "incremental_alter_configs", new_overrides)
