"""ElectLeaders (43): preferred (v0+) or unclean (v1+) leader elections.

As Kafka's ZooKeeper mode: the active controller runs the elections, other brokers
answer NOT_CONTROLLER for every partition (clients send this request to the controller
Metadata names). The answer then waits, up to the request's timeout, until this broker's
metadata shows each elected leader, and says REQUEST_TIMED_OUT for those it does not
show in time. A null partition list means every partition; the answer then leaves out
the partitions whose leader was already the right one (ELECTION_NOT_NEEDED).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.controller.replica_leader_election import ElectionType
from tiercel.server.handlers.common import timeout_ms, wait_for_metadata
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 43
MIN_VERSION: Final = 0
MAX_VERSION: Final = 2

# Kafka answers these with a null message (ApiError(error, null)).
_WITHOUT_MESSAGE: Final = frozenset({ErrorCode.not_controller, ErrorCode.request_timed_out})


def _requested(cache: MetadataCache, request: Any) -> set[TopicPartition]:
    if request.topic_partitions is None:
        return {
            TopicPartition(name, partition)
            for name, topic in cache.topics.items()
            for partition in topic.replicas
        }
    return {
        TopicPartition(topic.topic, partition)
        for topic in request.topic_partitions
        for partition in topic.partitions
    }


def _shows(cache: MetadataCache, elected: Mapping[TopicPartition, int]) -> set[TopicPartition]:
    """The partitions whose elected leader this broker's metadata shows."""
    shown = set()
    for tp, leader in elected.items():
        state = cache.partition_state(tp)
        if state is not None and state.leader == leader:
            shown.add(tp)
    return shown


def _response(
    error: ErrorCode, results: Mapping[TopicPartition, ErrorCode | KafkaError]
) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, result in sorted(results.items()):
        code = result if isinstance(result, ErrorCode) else result.error_code
        message = None
        if isinstance(result, KafkaError) and code not in _WITHOUT_MESSAGE:
            message = result.message
        by_topic[tp.topic].append(
            {"partition_id": tp.partition, "error_code": code, "error_message": message}
        )
    return {
        "throttle_time": 0,
        "error_code": error,
        "replica_election_results": [
            {"topic": topic, "partition_result": partitions}
            for topic, partitions in by_topic.items()
        ],
    }


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    cache = ctx.broker.metadata_cache
    try:
        # v0 has no election type: it always elects the preferred replica.
        election_type = ElectionType(getattr(request, "election_type", ElectionType.PREFERRED))
    except ValueError:
        return _response(ErrorCode.invalid_request, {})
    outcome = await ctx.controller.elect_leaders(_requested(cache, request), election_type)
    elected = {tp: leader for tp, leader in outcome.items() if isinstance(leader, int)}
    if elected:
        await wait_for_metadata(
            ctx, lambda c: len(_shows(c, elected)) == len(elected), timeout_ms(request.timeout)
        )
    shown = _shows(cache, elected)
    results: dict[TopicPartition, ErrorCode | KafkaError] = {}
    for tp, result in outcome.items():
        if isinstance(result, KafkaError):
            if request.topic_partitions is not None or (
                result.error_code != ErrorCode.election_not_needed
            ):
                results[tp] = result
        else:
            results[tp] = ErrorCode.none if tp in shown else ErrorCode.request_timed_out
    return _response(ErrorCode.none, results)
