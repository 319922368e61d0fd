"""DescribeGroups (15): state, protocol and members of classic groups; an unknown group
(or a KIP-848 consumer group, which ConsumerGroupDescribe describes) is Dead, and from v6
also GROUP_ID_NOT_FOUND, as in Kafka 4."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.coordinator.group.group_results import DEAD_GROUP_SUMMARY
from tiercel.server.handlers.common import AUTHORIZED_OPERATIONS_OMITTED
from tiercel.server.request_context import RequestContext

API_KEY: Final = 15
MIN_VERSION: Final = 0
MAX_VERSION: Final = 6

# From this version a group that is not a classic group is also GROUP_ID_NOT_FOUND.
_GROUP_ID_NOT_FOUND_VERSION: Final = 6
# Kafka's bits for READ, DELETE and DESCRIBE, the operations on a group: everything is
# allowed until authorization exists.
ALL_GROUP_OPERATIONS: Final = sum(1 << op for op in (3, 6, 8))


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coordinator = ctx.broker.group_coordinator
    include_operations = getattr(request, "include_authorized_operations", False)
    groups = []
    for group_id in request.groups:
        error, summary = coordinator.describe_group(group_id)
        message = None
        if (
            error is ErrorCode.none
            and summary is DEAD_GROUP_SUMMARY
            and ctx.api_version >= _GROUP_ID_NOT_FOUND_VERSION
        ):
            error = ErrorCode.group_id_not_found
            message = f"Group {group_id} not found."
        groups.append(
            {
                "error_code": error,
                "error_message": message,
                "group_id": group_id,
                "group_state": summary.state,
                "protocol_type": summary.protocol_type,
                "protocol_data": summary.protocol,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in summary.members
                ],
                "authorized_operations": (
                    ALL_GROUP_OPERATIONS
                    if include_operations and not error
                    else AUTHORIZED_OPERATIONS_OMITTED
                ),
            }
        )
    return {"throttle_time": 0, "groups": groups}
