"""AddOffsetsToTxn (25): a producer adds a group's offsets to its transaction
(``send_offsets_to_transaction``): the group's __consumer_offsets partition joins the
transaction, so that its TxnOffsetCommit records get the COMMIT/ABORT marker too
(Kafka's ``KafkaApis.handleAddOffsetsToTxnRequest``). Before v2, PRODUCER_FENCED is
answered as INVALID_PRODUCER_EPOCH, as there: those clients predate the code."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.coordinator.group.group_config import GROUP_METADATA_TOPIC_NAME
from tiercel.server.error_mapping import producer_fenced_for_version
from tiercel.server.request_context import RequestContext
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 25
MIN_VERSION: Final = 0
MAX_VERSION: Final = 4
_FIRST_PRODUCER_FENCED_VERSION: Final = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # WRITE on the transactional id, READ on the group (Kafka's
    # handleAddOffsetsToTxnRequest).
    txn_id = request.transactional_id
    if not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    offsets_partition = TopicPartition(
        GROUP_METADATA_TOPIC_NAME, ctx.broker.group_coordinator.partition_for(request.group_id)
    )
    error = await ctx.broker.transaction_coordinator.handle_add_partitions_to_transaction(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        [offsets_partition],
    )
    return {
        "throttle_time": 0,
        "error_code": producer_fenced_for_version(
            error, ctx.api_version, _FIRST_PRODUCER_FENCED_VERSION
        ),
    }
