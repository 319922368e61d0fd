"""JoinGroup (11): join a classic group, or rejoin it for a new generation."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.coordinator.group.group_join import JoinGroupParams
from tiercel.server.handlers.common import timeout_ms
from tiercel.server.request_context import RequestContext

API_KEY: Final = 11
MIN_VERSION: Final = 0
MAX_VERSION: Final = 9

# KIP-394: from v4 a dynamic member first gets MEMBER_ID_REQUIRED and its member id.
_MEMBER_ID_REQUIRED_VERSION: Final = 4
# v9 tells a static leader rejoining a Stable group to skip the assignment (KIP-814).
_SKIP_ASSIGNMENT_VERSION: Final = 9
# Before v7 the protocol name is not nullable.
_NULLABLE_PROTOCOL_NAME_VERSION: Final = 7


def client_host(ctx: RequestContext) -> str:
    """The client's address as Kafka reports it (Java's InetAddress.toString)."""
    return "/" + ctx.client_address.rsplit(":", 1)[0]


def _refused(version: int) -> dict[str, Any]:
    """Kafka's JoinGroupRequest.getErrorResponse of GROUP_AUTHORIZATION_FAILED."""
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.group_authorization_failed,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None if version >= _NULLABLE_PROTOCOL_NAME_VERSION else "",
        "leader": "",
        "skip_assignment": False,
        "member_id": "",
        "members": [],
    }


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    version = ctx.api_version
    # READ on the group, as Kafka's handleJoinGroupRequest.
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _refused(version)
    session_timeout = timeout_ms(request.session_timeout)
    # v0 has no rebalance timeout: the session timeout stands in for it.
    rebalance_timeout = timeout_ms(request.rebalance_timeout) if version >= 1 else session_timeout
    instance_id = getattr(request, "group_instance_id", None)
    params = JoinGroupParams(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=instance_id,
        require_known_member_id=version >= _MEMBER_ID_REQUIRED_VERSION and instance_id is None,
        support_skipping_assignment=version >= _SKIP_ASSIGNMENT_VERSION,
        client_id=ctx.header.client_id or "",
        client_host=client_host(ctx),
        rebalance_timeout_ms=rebalance_timeout,
        session_timeout_ms=session_timeout,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in request.protocols),
        reason=getattr(request, "reason", None),
    )
    result = await ctx.broker.group_coordinator.join_group(params)
    protocol_name = result.protocol_name
    if protocol_name is None and version < _NULLABLE_PROTOCOL_NAME_VERSION:
        protocol_name = ""
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol_name,
        "leader": result.leader_id,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in result.members
        ],
    }
