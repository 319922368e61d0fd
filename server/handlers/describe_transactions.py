"""DescribeTransactions (65): the state of transactional ids this broker coordinates
(KIP-664, ``kafka-transactions.sh describe``)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.request_context import RequestContext

API_KEY: Final = 65
MIN_VERSION: Final = 0
MAX_VERSION: Final = 0


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coordinator = ctx.broker.transaction_coordinator
    states = []
    for transactional_id in request.transactional_ids:
        # DESCRIBE on the transactional id (Kafka's handleDescribeTransactionsRequest).
        if authorize(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            error, metadata = coordinator.describe_transaction(transactional_id)
        else:
            error, metadata = ErrorCode.transactional_id_authorization_failed, None
        if metadata is None or error != ErrorCode.none:
            # Kafka leaves the other fields at their schema defaults (0, "").
            states.append(
                {
                    "error_code": error,
                    "transactional_id": transactional_id,
                    "transaction_state": "",
                    "transaction_timeout": 0,
                    "transaction_start_time": _time(0),
                    "producer_id": 0,
                    "producer_epoch": 0,
                    "topics": [],
                }
            )
            continue
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in metadata.topic_partitions:
            by_topic[tp.topic].append(tp.partition)
        states.append(
            {
                "error_code": ErrorCode.none,
                "transactional_id": transactional_id,
                "transaction_state": metadata.state.kafka_name,
                "transaction_timeout": metadata.txn_timeout_ms,
                "transaction_start_time": _time(metadata.txn_start_timestamp),
                "producer_id": metadata.producer_id,
                "producer_epoch": metadata.producer_epoch,
                # Only the topics the principal may DESCRIBE (Kafka's
                # handleDescribeTransactionsRequest).
                "topics": [
                    {"topic": t, "partitions": sorted(ps)}
                    for t, ps in sorted(by_topic.items())
                    if authorize(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t)
                ],
            }
        )
    return {"throttle_time": 0, "transaction_states": states}


def _time(ms: int) -> datetime:
    """kio's TZAware field encodes epoch milliseconds; Kafka sends -1 for an id with no
    transaction started, and so does Tiercel."""
    return datetime.fromtimestamp(ms / 1000, UTC)
