"""InitProducerId (22): a producer id and epoch for an idempotent or transactional
producer.

As Kafka (``KafkaApis.handleInitProducerIdRequest`` and the transaction coordinator):
a producer id without an epoch, or an epoch without an id, is INVALID_REQUEST; without
a transactional id every request gets a fresh id at epoch 0 (an idempotent producer
bumps its epoch itself); an empty transactional id is INVALID_REQUEST. With a
transactional id the transaction coordinator answers: the id's producer id at a new
epoch, which fences every older instance of the producer (KIP-98), or with v3+ and the
id and epoch a producer already holds, a KIP-360 bump that lets it recover. Before v4,
PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH (Kafka's
handleInitProducerIdRequest): those clients predate the code.
"""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode, InvalidRequestError, KafkaError
from tiercel.protocol.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, authorize_by_resource_type
from tiercel.server.error_mapping import producer_fenced_for_version
from tiercel.server.request_context import RequestContext

API_KEY: Final = 22
MIN_VERSION: Final = 0
MAX_VERSION: Final = 6
_FIRST_PRODUCER_FENCED_VERSION: Final = 4


def _authorization_error(ctx: RequestContext, transactional_id: str | None) -> ErrorCode | None:
    """Kafka's handleInitProducerIdRequest: WRITE on the transactional id; without one,
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic (authorizeByResourceType)."""
    if transactional_id is not None:
        if authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return None
        return ErrorCode.transactional_id_authorization_failed
    idempotent = authorize(
        ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
    )
    if idempotent or authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    transactional_id = request.transactional_id
    refused = _authorization_error(ctx, transactional_id)
    if refused is not None:
        return _response(refused, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    # v0-2 have no producer id and epoch fields: they mean "none".
    producer_id = getattr(request, "producer_id", NO_PRODUCER_ID)
    epoch = getattr(request, "producer_epoch", NO_PRODUCER_EPOCH)
    try:
        if (producer_id == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
            raise InvalidRequestError("a producer id and a producer epoch go together")
        if transactional_id is None:
            new_id = await ctx.broker.producer_id_manager.generate_producer_id()
            return _response(ErrorCode.none, new_id, 0)
    except KafkaError as e:
        return _response(e.error_code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    expected = None if producer_id == NO_PRODUCER_ID else (producer_id, epoch)
    timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
    result = await ctx.broker.transaction_coordinator.handle_init_producer_id(
        transactional_id, timeout_ms, expected
    )
    error = producer_fenced_for_version(
        result.error, ctx.api_version, _FIRST_PRODUCER_FENCED_VERSION
    )
    return _response(error, result.producer_id, result.producer_epoch)


def _response(error_code: ErrorCode, producer_id: int, producer_epoch: int) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": error_code,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "ongoing_txn_producer_id": NO_PRODUCER_ID,
        "ongoing_txn_producer_epoch": NO_PRODUCER_EPOCH,
    }
