"""DescribeGroups (15): state, protocol and members of classic groups; an unknown group
(or a KIP-848 consumer group, which ConsumerGroupDescribe describes) is Dead, and from v6
also GROUP_ID_NOT_FOUND, as in Kafka 4."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, authorized_operations
from tiercel.server.coordinator.group.group_results import DEAD_GROUP_SUMMARY
from tiercel.server.handlers.common import AUTHORIZED_OPERATIONS_OMITTED
from tiercel.server.request_context import RequestContext

API_KEY: Final = 15
MIN_VERSION: Final = 0
MAX_VERSION: Final = 6

# From this version a group that is not a classic group is also GROUP_ID_NOT_FOUND.
_GROUP_ID_NOT_FOUND_VERSION: Final = 6


def _refused(group_id: str) -> dict[str, Any]:
    """Kafka's DescribeGroupsResponse.groupError of GROUP_AUTHORIZATION_FAILED."""
    return {
        "error_code": ErrorCode.group_authorization_failed,
        "error_message": None,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coordinator = ctx.broker.group_coordinator
    include_operations = getattr(request, "include_authorized_operations", False)
    groups = []
    for group_id in request.groups:
        # DESCRIBE on the group, as Kafka's handleDescribeGroupsRequest.
        if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_refused(group_id))
            continue
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
                    authorized_operations(ctx, ResourceType.GROUP, group_id)
                    if include_operations and not error
                    else AUTHORIZED_OPERATIONS_OMITTED
                ),
            }
        )
    return {"throttle_time": 0, "groups": groups}
