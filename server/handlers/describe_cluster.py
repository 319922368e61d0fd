"""DescribeCluster (60): cluster id, controller and brokers on the client's listener."""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, authorized_operations
from tiercel.server.handlers.common import AUTHORIZED_OPERATIONS_OMITTED, alive_broker_nodes
from tiercel.server.request_context import RequestContext

API_KEY: Final = 60
MIN_VERSION: Final = 0
MAX_VERSION: Final = 1

_BROKERS_ENDPOINT_TYPE: Final = 1


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    cache = ctx.broker.metadata_cache
    endpoint_type = getattr(request, "endpoint_type", _BROKERS_ENDPOINT_TYPE)
    if endpoint_type != _BROKERS_ENDPOINT_TYPE:
        return {
            "error_code": ErrorCode.unsupported_endpoint_type,
            "error_message": "Only brokers (endpoint type 1) are described.",
            "endpoint_type": endpoint_type,
            "cluster_id": cache.cluster_id,
            "controller_id": -1,
            "brokers": [],
        }
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": _BROKERS_ENDPOINT_TYPE,
        "cluster_id": cache.cluster_id,
        "controller_id": cache.controller_id,
        "brokers": alive_broker_nodes(ctx, "broker_id"),
        "cluster_authorized_operations": _cluster_operations(ctx, request),
    }


def _cluster_operations(ctx: RequestContext, request: Any) -> int:
    """Kafka's AuthHelper.computeDescribeClusterResponse: asked for, the operations the
    principal may do on the cluster, 0 without DESCRIBE on it."""
    if not request.include_cluster_authorized_operations:
        return AUTHORIZED_OPERATIONS_OMITTED
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
