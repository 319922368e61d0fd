"""DeleteTopics (20): request deletion by name or id, wait until the topic is gone."""

from __future__ import annotations

import uuid
from typing import Any, Final

from tiercel.protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    RequestTimedOutError,
    UnknownTopicIdError,
)
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.handlers.common import timeout_ms, wait_for_metadata
from tiercel.server.request_context import RequestContext

API_KEY: Final = 20
MIN_VERSION: Final = 1
MAX_VERSION: Final = 6

_ZERO_ID: Final = uuid.UUID(int=0)


def _targets(request: Any) -> list[tuple[str | None, uuid.UUID | None]]:
    if hasattr(request, "topics"):  # v6+: names or ids; before, names only
        return [(t.name, t.topic_id if t.topic_id != _ZERO_ID else None) for t in request.topics]
    return [(name, None) for name in request.topic_names]


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    cache = ctx.broker.metadata_cache
    admin = ctx.broker.admin_manager
    responses: list[dict[str, object]] = []
    requested: list[uuid.UUID] = []
    for name, topic_id in _targets(request):
        error: KafkaError | None = None
        try:
            if name is not None and topic_id is not None:
                raise InvalidRequestError("Topic name and topic id cannot both be set")
            if name is None:
                name = cache.topic_name(topic_id) if topic_id is not None else None
                if name is None:
                    raise UnknownTopicIdError(f"Topic id {topic_id} does not exist")
            topic_id = await admin.delete_topic(name)
            requested.append(topic_id)
        except Exception as e:
            error = as_kafka_error(e, "delete_topics")
        responses.append(
            {
                "name": name,
                "topic_id": topic_id,
                "error_code": error.error_code if error else ErrorCode.none,
                "error_message": error.message if error else None,
            }
        )
    if requested:
        gone = await wait_for_metadata(
            ctx,
            lambda c: all(c.topic_name(i) is None for i in requested),
            timeout_ms(request.timeout),
        )
        if not gone:
            timed_out = RequestTimedOutError("Topic deletion was not completed within the timeout")
            for response in responses:
                still_there = response["topic_id"]
                if isinstance(still_there, uuid.UUID) and cache.topic_name(still_there):
                    response["error_code"] = timed_out.error_code
                    response["error_message"] = timed_out.message
    return {"throttle_time": 0, "responses": responses}
