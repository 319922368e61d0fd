"""CreatePartitions (37): grow a topic, with explicit or computed replica assignments."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode, InvalidRequestError, KafkaError, RequestTimedOutError
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.handlers.common import timeout_ms, wait_for_metadata
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.request_context import RequestContext

API_KEY: Final = 37
MIN_VERSION: Final = 0
MAX_VERSION: Final = 3


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    admin = ctx.broker.admin_manager
    cache = ctx.broker.metadata_cache
    names = [t.name for t in request.topics]
    results = []
    grown: dict[str, int] = {}
    added: dict[str, int] = {}  # partitions this request added, by topic
    for topic in request.topics:
        error: KafkaError | None = None
        try:
            if names.count(topic.name) > 1:
                raise InvalidRequestError("Duplicate topic in request.")
            assignments = (
                None
                if topic.assignments is None
                else [list(a.broker_ids) for a in topic.assignments]
            )
            before = cache.topic(topic.name)
            assignment = await admin.create_partitions(
                topic.name,
                topic.count,
                assignments,
                validate_only=request.validate_only,
                pending_partitions=_not_yet_cached(cache, grown, added),
            )
            if not request.validate_only:
                grown[topic.name] = topic.count
                added[topic.name] = len(assignment) - (before.partition_count if before else 0)
        except Exception as e:
            error = as_kafka_error(e, "create_partitions")
        results.append(
            {
                "name": topic.name,
                "error_code": error.error_code if error else ErrorCode.none,
                "error_message": error.message if error else None,
            }
        )
    if grown:
        ready = await wait_for_metadata(
            ctx,
            lambda cache: all(
                (t := cache.topic(n)) is not None and t.partition_count >= count and t.has_leaders()
                for n, count in grown.items()
            ),
            timeout_ms(request.timeout),
        )
        if not ready:
            timed_out = RequestTimedOutError("Partition creation did not complete in time")
            for result in results:
                if result["name"] in grown:
                    result["error_code"] = timed_out.error_code
                    result["error_message"] = timed_out.message
    return {"throttle_time": 0, "results": results}


def _not_yet_cached(cache: MetadataCache, grown: dict[str, int], added: dict[str, int]) -> int:
    """Partitions added earlier in this request that the metadata cache does not show
    yet: they count towards max.partitions."""
    return sum(
        n
        for name, n in added.items()
        if (t := cache.topic(name)) is None or t.partition_count < grown[name]
    )
