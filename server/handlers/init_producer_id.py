"""InitProducerId (22): a new producer id, epoch 0, for an idempotent producer.

As Kafka (``KafkaApis.handleInitProducerIdRequest`` and the transaction coordinator):
a producer id without an epoch, or an epoch without an id, is INVALID_REQUEST; without
a transactional id every request gets a fresh id at epoch 0 (an idempotent producer
bumps its epoch itself); an empty transactional id is INVALID_REQUEST. Transactions
are not implemented yet: a transactional id is answered with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which librdkafka, the Java client and
kafka-python all treat as fatal, so ``init_transactions()`` fails at once rather than
retrying until it times out.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    TransactionalIdAuthorizationFailedError,
)
from tiercel.protocol.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from tiercel.server.request_context import RequestContext

API_KEY: Final = 22
MIN_VERSION: Final = 0
MAX_VERSION: Final = 6

_log: Final = logging.getLogger("tiercel.init_producer_id")


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    try:
        _check(ctx, request)
        producer_id = await ctx.broker.producer_id_manager.generate_producer_id()
    except KafkaError as e:
        return _response(e.error_code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    return _response(ErrorCode.none, producer_id, 0)


def _check(ctx: RequestContext, request: Any) -> None:
    """Kafka's order: the transactional id's authorization (where our refusal of
    transactions sits), then the id and epoch pairing, then the coordinator's checks."""
    transactional_id = request.transactional_id
    if transactional_id:
        log_event(
            _log,
            logging.WARNING,
            "transactions_not_supported",
            **ctx.describe(),
            transactional_id=transactional_id,
        )
        raise TransactionalIdAuthorizationFailedError(
            f"transactional id {transactional_id!r}: transactions are not supported"
        )
    # v0-2 have no producer id and epoch fields: they mean "none".
    producer_id = getattr(request, "producer_id", NO_PRODUCER_ID)
    epoch = getattr(request, "producer_epoch", NO_PRODUCER_EPOCH)
    if (producer_id == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
        raise InvalidRequestError("a producer id and a producer epoch go together")
    if transactional_id == "":
        raise InvalidRequestError("the transactional id is empty")


def _response(error_code: ErrorCode, producer_id: int, producer_epoch: int) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": error_code,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "ongoing_txn_producer_id": NO_PRODUCER_ID,
        "ongoing_txn_producer_epoch": NO_PRODUCER_EPOCH,
    }
