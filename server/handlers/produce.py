"""Produce (0): append one record batch per partition, acks 0, 1 or -1.

Versions 3+ are decoded; 0-2 are still advertised, as Kafka 4 does (KAFKA-18659),
because librdkafka turns compression off against a broker that advertises no v0-2.
A transaction's first write to a partition waits for its coordinator to confirm the
partition is in the transaction (KIP-890 part 1, `transaction_verification`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.compression import CompressionType
from tiercel.protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedCompressionTypeError,
)
from tiercel.protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, filter_by_authorized
from tiercel.server.handlers.common import current_leader, error_fields, node_endpoints, timeout_ms
from tiercel.server.network.connection import CloseConnection
from tiercel.server.replica_manager import ProduceResult
from tiercel.server.request_context import RequestContext
from tiercel.server.transaction_verification import handle_produce_append
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 0
MIN_VERSION: Final = 3
MAX_VERSION: Final = 11
ADVERTISED_MIN_VERSION: Final = 0

_ZSTD_MIN_VERSION: Final = 7
_BAD_DATA_ERRORS: Final = frozenset(
    {
        ErrorCode.corrupt_message,
        ErrorCode.invalid_record,
        ErrorCode.message_too_large,
        ErrorCode.record_list_too_large,
        ErrorCode.invalid_timestamp,
        ErrorCode.unsupported_compression_type,
        ErrorCode.unknown_server_error,
    }
)
_log: Final = logging.getLogger("tiercel.produce")


def _is_transactional(records: bytes | None) -> bool:
    """The first batch's transactional flag (Kafka's hasTransactionalRecords looks at
    every batch; a producer's batches to one partition are all one kind)."""
    if records is None or len(records) <= ATTRIBUTES_OFFSET + 1:
        return False
    return bool(records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG_MASK)


def _authorize(
    ctx: RequestContext,
    request: Any,
    entries: dict[TopicPartition, bytes | None],
    rejected: dict[TopicPartition, ProduceResult],
) -> bool:
    """Kafka's handleProduceRequest checks: WRITE on the transactional id when the
    records are transactional (False: the whole request fails with
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic, once per topic
    (partitions of the others fail with TOPIC_AUTHORIZATION_FAILED)."""
    txn_id = request.transactional_id
    if any(_is_transactional(records) for records in entries.values()) and (
        txn_id is None
        or not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
    ):
        return False
    allowed = filter_by_authorized(
        ctx, AclOperation.WRITE, ResourceType.TOPIC, (tp.topic for tp in entries)
    )
    for tp in [tp for tp in entries if tp.topic not in allowed]:
        del entries[tp]
        rejected[tp] = ProduceResult(TopicAuthorizationFailedError())
    return True


def _uses_zstd(records: bytes | None) -> bool:
    if records is None or len(records) <= ATTRIBUTES_OFFSET + 1:
        return False
    codec = records[ATTRIBUTES_OFFSET + 1] & COMPRESSION_CODEC_MASK
    return codec == CompressionType.ZSTD


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any] | None:
    entries: dict[TopicPartition, bytes | None] = {}
    rejected: dict[TopicPartition, ProduceResult] = {}
    for topic in request.topic_data:
        for data in topic.partition_data:
            tp = TopicPartition(topic.name, data.index)
            if tp in entries or tp in rejected:
                rejected[tp] = ProduceResult(InvalidRequestError(f"{tp} appears twice"))
                entries.pop(tp, None)
            elif ctx.api_version < _ZSTD_MIN_VERSION and _uses_zstd(data.records):
                rejected[tp] = ProduceResult(
                    UnsupportedCompressionTypeError(
                        f"zstd needs Produce v{_ZSTD_MIN_VERSION}+, got v{ctx.api_version}"
                    )
                )
            else:
                entries[tp] = data.records
    if ctx.authorizer is not None and not _authorize(ctx, request, entries, rejected):
        error = TransactionalIdAuthorizationFailedError()
        rejected.update((tp, ProduceResult(error)) for tp in entries)
        entries.clear()
    results = await handle_produce_append(
        ctx.broker.replica_manager,
        timeout_ms(request.timeout),
        request.acks,
        entries,
        request.transactional_id,
    )
    results.update(rejected)
    failed = _log_rejected(ctx, results)
    if request.acks == 0:
        if failed:
            # The client reads no response with acks=0: closing the connection is how
            # Kafka tells it something went wrong.
            log_event(
                _log,
                logging.WARNING,
                "acks0_produce_failed_connection_closed",
                client=ctx.client_address,
                partitions=failed,
            )
            raise CloseConnection()
        return None
    return _response(ctx, results)


def _log_rejected(ctx: RequestContext, results: dict[TopicPartition, ProduceResult]) -> int:
    """One line per partition whose data was refused as malformed or too large, naming
    the client, so an operator can find the misbehaving producer."""
    failed = 0
    for tp, result in results.items():
        if result.error is None:
            continue
        failed += 1
        if result.error.error_code in _BAD_DATA_ERRORS:
            log_event(
                _log,
                logging.WARNING,
                "produce_rejected",
                client=ctx.client_address,
                client_id=ctx.header.client_id,
                partition=str(tp),
                error=result.error.error_code.name,
                reason=result.error.message,
            )
    return failed


def _record_errors(error: KafkaError | None) -> list[dict[str, Any]]:
    """Produce v8+ (KIP-467): the records that failed validation, by batch index."""
    if error is None:
        return []
    return [
        {"batch_index": e.batch_index, "batch_index_error_message": e.message}
        for e in error.record_errors
    ]


def _response(ctx: RequestContext, results: dict[TopicPartition, ProduceResult]) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    leader_ids = set()
    for tp, result in results.items():
        info = result.info
        leader = current_leader(ctx, tp, result.error)
        if leader["leader_id"] >= 0:
            leader_ids.add(leader["leader_id"])
        by_topic[tp.topic].append(
            {
                "index": tp.partition,
                **error_fields(result.error),
                "base_offset": info.first_offset if info else -1,
                "log_append_time": info.log_append_time if info else -1,
                "log_start_offset": info.log_start_offset if info else -1,
                "record_errors": _record_errors(result.error),
                "current_leader": leader,
            }
        )
    return {
        "responses": [
            {"name": name, "partition_responses": parts} for name, parts in by_topic.items()
        ],
        "throttle_time": 0,
        "node_endpoints": node_endpoints(ctx, leader_ids),
    }
