"""Fetch (1): read record batches, long-polling until min_bytes or max_wait.

A fetch from a follower (replica id, or ReplicaState from v15) reads to the log end and
tells the leader where the follower is (`Partition.fetch_records_for_follower`);
consumers read below the high watermark (or the last stable offset).

Sessions (KIP-227) are not kept: every response carries session id 0, which clients
treat as "no session" and answer with full fetches, as they do when a broker's session
cache is full. Topic ids (v13+) are resolved through the metadata cache.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode, KafkaError, UnknownTopicIdError
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, filter_by_authorized
from tiercel.server.delayed_fetch import FetchRequestPartition, FetchResult
from tiercel.server.handlers.common import current_leader, node_endpoints, timeout_ms
from tiercel.server.partition import LogReadResult
from tiercel.server.request_context import RequestContext
from tiercel.storage.log_values import FetchIsolation
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 1
MIN_VERSION: Final = 4
MAX_VERSION: Final = 17

_TOPIC_IDS_VERSION: Final = 13
_READ_COMMITTED: Final = 1


def _partition_response(
    ctx: RequestContext, tp: TopicPartition, result: FetchResult, read_committed: bool
) -> dict[str, Any]:
    read = result.read
    error = result.error
    response: dict[str, Any] = {
        "partition_index": tp.partition,
        "error_code": error.error_code if error else ErrorCode.none,
        "high_watermark": read.high_watermark if read else -1,
        "last_stable_offset": read.last_stable_offset if read else -1,
        "log_start_offset": read.log_start_offset if read else -1,
        "current_leader": current_leader(ctx, tp, error),
        "aborted_transactions": _aborted_transactions(read, read_committed),
        "preferred_read_replica": -1,
        "records": read.info.records if read else b"",
    }
    if read is not None and read.diverging_epoch is not None:
        response["diverging_epoch"] = {
            "epoch": read.diverging_epoch[0],
            "end_offset": read.diverging_epoch[1],
        }
    return response


def _aborted_transactions(
    read: LogReadResult | None, read_committed: bool
) -> list[dict[str, int]] | None:
    """read_committed only: the aborted transactions overlapping the records read."""
    if not read_committed or read is None:
        return None
    return [
        {"producer_id": txn.producer_id, "first_offset": txn.first_offset}
        for txn in read.info.aborted_transactions or ()
    ]


def _replica_id(request: Any) -> int:
    """The fetching replica's broker id (-1 for consumers): a field before v15, inside
    ReplicaState (KIP-903) from v15."""
    state = getattr(request, "replica_state", None)
    return state.replica_id if state is not None else getattr(request, "replica_id", -1)


def _failed(partition: int, error_code: ErrorCode) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "error_code": error_code,
        "high_watermark": -1,
        "records": b"",
        "aborted_transactions": None,
    }


def _authorize(
    ctx: RequestContext, requests: list[FetchRequestPartition], replica_id: int
) -> tuple[list[FetchRequestPartition], list[TopicPartition]]:
    """Kafka's handleFetchRequest checks: a follower needs CLUSTER_ACTION on the cluster
    (without it every partition fails), a consumer READ on each topic, decided once per
    topic. The partitions to read, and those refused with TOPIC_AUTHORIZATION_FAILED."""
    if replica_id >= 0:
        if authorize(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return requests, []
        return [], [r.topic_partition for r in requests]
    allowed = filter_by_authorized(
        ctx, AclOperation.READ, ResourceType.TOPIC, (r.topic_partition.topic for r in requests)
    )
    return (
        [r for r in requests if r.topic_partition.topic in allowed],
        [r.topic_partition for r in requests if r.topic_partition.topic not in allowed],
    )


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    cache = ctx.broker.metadata_cache
    by_id = ctx.api_version >= _TOPIC_IDS_VERSION
    # Sessions (v7+) are never created here, so an id other than 0 cannot be ours.
    if getattr(request, "session_id", 0) != 0:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.fetch_session_id_not_found,
            "session_id": 0,
            "responses": [],
        }
    requests: list[FetchRequestPartition] = []
    unresolved: dict[uuid.UUID, list[int]] = defaultdict(list)
    topic_ids: dict[str, uuid.UUID] = {}
    for topic in request.topics:
        name = cache.topic_name(topic.topic_id) if by_id else topic.topic
        if name is None:
            unresolved[topic.topic_id].extend(p.partition for p in topic.partitions)
            continue
        if by_id:
            topic_ids[name] = topic.topic_id
        for p in topic.partitions:
            requests.append(
                FetchRequestPartition(
                    TopicPartition(name, p.partition),
                    p.fetch_offset,
                    p.partition_max_bytes,
                    getattr(p, "current_leader_epoch", -1),  # v9+
                    getattr(p, "last_fetched_epoch", -1),
                    getattr(p, "log_start_offset", -1),
                )
            )
    read_committed = request.isolation_level == _READ_COMMITTED
    replica_id = _replica_id(request)
    denied: list[TopicPartition] = []
    if ctx.authorizer is not None:
        requests, denied = _authorize(ctx, requests, replica_id)
    if replica_id >= 0:
        isolation = FetchIsolation.LOG_END  # a follower reads up to the log end
    elif read_committed:
        isolation = FetchIsolation.TXN_COMMITTED
    else:
        isolation = FetchIsolation.HIGH_WATERMARK
    results = await ctx.broker.replica_manager.fetch_messages(
        requests,
        timeout_ms(request.max_wait),
        request.min_bytes,
        getattr(request, "max_bytes", 2**31 - 1),
        isolation,
        replica_id,
    )
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    leader_ids: set[int] = set()
    for fetch, result in zip(requests, results, strict=True):
        partition = _partition_response(ctx, fetch.topic_partition, result, read_committed)
        if partition["current_leader"]["leader_id"] >= 0:
            leader_ids.add(partition["current_leader"]["leader_id"])
        grouped[fetch.topic_partition.topic].append(partition)
    for tp in denied:
        grouped[tp.topic].append(_failed(tp.partition, ErrorCode.topic_authorization_failed))
    responses = [
        {"topic": name, "topic_id": topic_ids.get(name), "partitions": parts}
        for name, parts in grouped.items()
    ]
    unknown: KafkaError = UnknownTopicIdError()
    responses.extend(
        {
            "topic": None,
            "topic_id": topic_id,
            "partitions": [_failed(p, unknown.error_code) for p in partitions],
        }
        for topic_id, partitions in unresolved.items()
    )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": responses,
        "node_endpoints": node_endpoints(ctx, leader_ids),
    }
