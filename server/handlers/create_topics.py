"""CreateTopics (19): validate, write assignments and configs, wait for leaders."""

from __future__ import annotations

from typing import Any, Final

from tiercel.config.log_config import describe_topic_configs
from tiercel.protocol.errors import ErrorCode, InvalidRequestError, KafkaError, RequestTimedOutError
from tiercel.server.admin_manager import CreatedTopic, NewTopic
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.handlers.common import timeout_ms, wait_for_metadata
from tiercel.server.request_context import RequestContext

API_KEY: Final = 19
MIN_VERSION: Final = 2
MAX_VERSION: Final = 7


def _new_topic(topic: Any) -> NewTopic:
    return NewTopic(
        name=topic.name,
        num_partitions=topic.num_partitions,
        replication_factor=topic.replication_factor,
        assignments={a.partition_index: list(a.broker_ids) for a in topic.assignments},
        configs={c.name: c.value for c in topic.configs},
    )


def _result(
    ctx: RequestContext, name: str, planned: CreatedTopic | None, error: KafkaError | None
) -> dict[str, Any]:
    if planned is None or error is not None:
        return {
            "name": name,
            "topic_id": None,
            "error_code": error.error_code if error else 0,
            "error_message": error.message if error else None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }
    configs = [
        {
            "name": e.name,
            "value": e.value,
            "read_only": e.read_only,
            "config_source": int(e.source),
            "is_sensitive": e.sensitive,
        }
        for e in describe_topic_configs(ctx.broker.config, planned.overrides)
    ]
    return {
        "name": name,
        "topic_id": planned.topic_id,
        "error_code": ErrorCode.none,
        "error_message": None,
        "num_partitions": len(planned.assignment),
        "replication_factor": len(next(iter(planned.assignment.values()))),
        "configs": configs,
    }


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    admin = ctx.broker.admin_manager
    cache = ctx.broker.metadata_cache
    names = [t.name for t in request.topics]
    results: dict[str, dict[str, Any]] = {}
    created: dict[str, int] = {}  # name -> partitions
    for topic in request.topics:
        if names.count(topic.name) > 1:
            results[topic.name] = _result(
                ctx,
                topic.name,
                None,
                InvalidRequestError("Create topics request from client contains duplicate topic"),
            )
            continue
        planned: CreatedTopic | None = None
        try:
            pending = sum(n for name, n in created.items() if cache.topic(name) is None)
            planned = admin.plan_topic(_new_topic(topic), pending)
            if not request.validate_only:
                await admin.create_topic(topic.name, planned)
                created[topic.name] = len(planned.assignment)
            results[topic.name] = _result(ctx, topic.name, planned, None)
        except Exception as e:
            error = as_kafka_error(e, "create_topics")
            results[topic.name] = _result(ctx, topic.name, None, error)
    if created:
        ready = await wait_for_metadata(
            ctx,
            lambda cache: all(
                (t := cache.topic(n)) is not None and t.has_leaders() for n in created
            ),
            timeout_ms(request.timeout),
        )
        if not ready:
            for name in created:
                topic = ctx.broker.metadata_cache.topic(name)
                if topic is None or not topic.has_leaders():
                    results[name] = _result(
                        ctx,
                        name,
                        None,
                        RequestTimedOutError("Topic creation was not completed within the timeout"),
                    )
    return {"throttle_time": 0, "topics": list(results.values())}
