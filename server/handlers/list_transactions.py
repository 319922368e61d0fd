"""ListTransactions (66): the transactional ids this broker coordinates, filtered by
state, producer id, how long they have been open (v1, KIP-994) and an id pattern (v2;
Kafka matches it with RE2/J, Tiercel with Python's ``re`` — the same for the usual
patterns). Unknown state names are returned in ``unknown_state_filters``."""

from __future__ import annotations

import re
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.request_context import RequestContext

API_KEY: Final = 66
MIN_VERSION: Final = 0
MAX_VERSION: Final = 2


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    duration = getattr(request, "duration_filter", -1)
    pattern_text = getattr(request, "transactional_id_pattern", None)
    pattern = None
    if pattern_text:
        try:
            pattern = re.compile(pattern_text)
        except re.error:
            return _response(ErrorCode.invalid_regular_expression, [], [])
    error, found, unknown = ctx.broker.transaction_coordinator.list_transactions(
        set(request.producer_id_filters), list(request.state_filters), duration
    )
    states = [
        {
            "transactional_id": m.transactional_id,
            "producer_id": m.producer_id,
            "transaction_state": m.state.kafka_name,
        }
        for m in found
        if (pattern is None or pattern.fullmatch(m.transactional_id))
        # Those the principal may DESCRIBE (Kafka's handleListTransactionsRequest).
        and authorize(
            ctx,
            AclOperation.DESCRIBE,
            ResourceType.TRANSACTIONAL_ID,
            m.transactional_id,
            log_if_denied=False,
        )
    ]
    return _response(error, unknown, states)


def _response(error: ErrorCode, unknown: list[str], states: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": error,
        "unknown_state_filters": unknown,
        "transaction_states": states,
    }
