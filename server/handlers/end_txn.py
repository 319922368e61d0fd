"""EndTxn (26): a producer commits or aborts its transaction. The coordinator answers
once PrepareCommit/PrepareAbort is written; the markers follow (KIP-98).

v0-4 only: v5 belongs to transaction version 2 (KIP-890 part 2, an epoch bump per
transaction), which Tiercel does not finalize, so clients never need it. Before v2,
PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH (Kafka's handleEndTxnRequest):
those clients predate the code."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.error_mapping import producer_fenced_for_version
from tiercel.server.request_context import RequestContext

API_KEY: Final = 26
MIN_VERSION: Final = 0
MAX_VERSION: Final = 4
_FIRST_PRODUCER_FENCED_VERSION: Final = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # WRITE on the transactional id (Kafka's handleEndTxnRequest).
    txn_id = request.transactional_id
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    error = await ctx.broker.transaction_coordinator.handle_end_transaction(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.committed,
    )
    return {
        "throttle_time": 0,
        "error_code": producer_fenced_for_version(
            error, ctx.api_version, _FIRST_PRODUCER_FENCED_VERSION
        ),
    }
