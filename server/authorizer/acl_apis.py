"""DescribeAcls as Kafka's AclApis.handleDescribeAcls answers it, on a broker and on a
controller alike: DESCRIBE on the cluster first (else CLUSTER_AUTHORIZATION_FAILED),
SECURITY_DISABLED without an authorizer, else the ACLs the filter matches grouped by
resource pattern (DescribeAclsResponse.aclsResources). A filter with an UNKNOWN code is
INVALID_REQUEST, as DescribeAclsRequest.validate refuses it."""

from __future__ import annotations

from typing import Any

from tiercel.protocol.errors import ClusterAuthorizationFailedError, ErrorCode
from tiercel.server.authorizer.acl import AclBindingFilter, AclOperation
from tiercel.server.authorizer.auth_helper import Caller, authorize_cluster_operation

__all__ = ["describe_acls"]


def _error(code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": []}


def describe_acls(ctx: Caller, request: Any) -> dict[str, Any]:
    try:
        authorize_cluster_operation(ctx, AclOperation.DESCRIBE)
    except ClusterAuthorizationFailedError as e:
        return _error(e.error_code, e.message)
    authorizer = ctx.authorizer
    if authorizer is None:
        return _error(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    acl_filter = AclBindingFilter(
        request.resource_type_filter,
        request.resource_name_filter,
        request.pattern_type_filter,
        request.principal_filter,
        request.host_filter,
        request.operation,
        request.permission_type,
    )
    if acl_filter.is_unknown():
        # DescribeAclsRequest.validate's message.
        return _error(ErrorCode.invalid_request, "DescribeAclsRequest contains UNKNOWN elements")
    resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for acl in authorizer.acls(acl_filter):
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        resources.setdefault(key, []).append(
            {
                "principal": acl.principal,
                "host": acl.host,
                "operation": acl.operation,
                "permission_type": acl.permission_type,
            }
        )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "pattern_type": pattern_type,
                "acls": acls,
            }
            for (resource_type, name, pattern_type), acls in resources.items()
        ],
    }
