"""AddPartitionsToTxn (24): a producer adds partitions to its open transaction (v0-3),
or a partition leader verifies them (v4+, KIP-890 part 1).

v0-3 carry one transaction from a client; v4+ carry a batch, each transaction either
added (verify_only false) or only checked: whether each partition is already part of
the producer's open transaction (INVALID_TXN_STATE if not). As Kafka's
``KafkaApis.handleAddPartitionsToTxnRequest``: a topic this broker does not know fails
the whole transaction, its unknown partitions with UNKNOWN_TOPIC_OR_PARTITION and the
others with OPERATION_NOT_ATTEMPTED; otherwise every partition carries the
coordinator's answer. A v4+ batch with a transaction added for a client would be a v3
request in disguise: Kafka refuses v4+ from clients, Tiercel serves both forms. Before
v2, PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH, as Kafka does: those
clients predate the code.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, filter_by_authorized
from tiercel.server.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from tiercel.server.error_mapping import producer_fenced_for_version
from tiercel.server.handlers.common import INTERNAL_TOPICS
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 24
MIN_VERSION: Final = 0
MAX_VERSION: Final = 5

_FIRST_BATCHED_VERSION: Final = 4
_FIRST_PRODUCER_FENCED_VERSION: Final = 2


def _refused(
    ctx: RequestContext, transactional_id: str, topics: Iterable[Any]
) -> dict[TopicPartition, ErrorCode] | None:
    """Kafka's checks of a client's v0-3 request: WRITE on the transactional id (else
    every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic but
    the internal ones (else TOPIC_AUTHORIZATION_FAILED there, OPERATION_NOT_ATTEMPTED on
    the rest); None when nothing is refused."""
    partitions = [TopicPartition(t.name, p) for t in topics for p in t.partitions]
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
    names = {tp.topic for tp in partitions if tp.topic not in INTERNAL_TOPICS}
    denied = names - filter_by_authorized(ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
    if not denied:
        return None
    return {
        tp: ErrorCode.topic_authorization_failed
        if tp.topic in denied
        else ErrorCode.operation_not_attempted
        for tp in partitions
    }


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.api_version < _FIRST_BATCHED_VERSION:
        refused = _refused(ctx, request.v3_and_below_transactional_id, request.v3_and_below_topics)
        if refused is not None:
            return {"throttle_time": 0, "results_by_topic_v3_and_below": _topics(refused)}
        results = await _one(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            False,
            request.v3_and_below_topics,
        )
        results = {
            tp: producer_fenced_for_version(error, ctx.api_version, _FIRST_PRODUCER_FENCED_VERSION)
            for tp, error in results.items()
        }
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _topics(results)}
    # v4+ comes from partition leaders: CLUSTER_ACTION, as Kafka's
    # handleAddPartitionsToTxnRequest.
    if not authorize(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "results_by_transaction": [],
        }
    transactions = []
    for txn in request.transactions:
        results = await _one(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.verify_only,
            txn.topics,
        )
        transactions.append(
            {"transactional_id": txn.transactional_id, "topic_results": _topics(results)}
        )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "results_by_transaction": transactions,
    }


async def _one(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    verify_only: bool,
    topics: Iterable[Any],
) -> dict[TopicPartition, ErrorCode]:
    partitions = [TopicPartition(t.name, p) for t in topics for p in t.partitions]
    cache = ctx.broker.metadata_cache
    coordinator = ctx.broker.transaction_coordinator
    if verify_only:
        return verify_partitions(
            cache, coordinator, transactional_id, producer_id, producer_epoch, partitions
        )
    unknown = _unknown(cache, partitions)
    if unknown is not None:
        return unknown
    error = await coordinator.handle_add_partitions_to_transaction(
        transactional_id, producer_id, producer_epoch, partitions
    )
    return dict.fromkeys(partitions, error)


def _unknown(
    cache: MetadataCache, partitions: Sequence[TopicPartition]
) -> dict[TopicPartition, ErrorCode] | None:
    unknown = {tp for tp in partitions if cache.partition_state(tp) is None}
    if not unknown:
        return None
    return {
        tp: ErrorCode.unknown_topic_or_partition
        if tp in unknown
        else ErrorCode.operation_not_attempted
        for tp in partitions
    }


def verify_partitions(
    cache: MetadataCache,
    coordinator: TransactionCoordinator,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Sequence[TopicPartition],
) -> dict[TopicPartition, ErrorCode]:
    """One verify_only transaction's answer per partition; also what a partition leader
    gets without a round trip when it is the coordinator itself."""
    unknown = _unknown(cache, partitions)
    if unknown is not None:
        return unknown
    return coordinator.handle_verify_partitions_in_transaction(
        transactional_id, producer_id, producer_epoch, partitions
    )


def _topics(results: Mapping[TopicPartition, ErrorCode]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, error in results.items():
        by_topic[tp.topic].append({"partition_index": tp.partition, "partition_error_code": error})
    return [{"name": name, "results_by_partition": ps} for name, ps in by_topic.items()]
