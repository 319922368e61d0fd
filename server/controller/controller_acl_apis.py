"""The ACL APIs on a controller (Kafka's AclApis as ControllerApis uses it, with
StandardAuthorizer's createAcls/deleteAcls going to QuorumController): CreateAcls and
DeleteAcls need ALTER on the cluster, then SECURITY_DISABLED without an authorizer, then
one result per binding (creation) or per filter (deletion, with the ACLs it removed), in
request order; DescribeAcls is answered from the controller's authorizer. Versions 1-3:
Kafka 4 dropped v0 (KIP-896).
"""

from __future__ import annotations

from typing import Any

from tiercel.protocol.errors import ErrorCode, KafkaError, SecurityDisabledError
from tiercel.server.authorizer import acl_apis
from tiercel.server.authorizer.acl import AclBindingFilter, AclOperation
from tiercel.server.authorizer.auth_helper import authorize_cluster_operation
from tiercel.server.controller.controller_request_context import ControllerRequestContext
from tiercel.server.metadata.image.acls import StandardAcl

__all__ = ["create_acls", "delete_acls", "describe_acls"]


def _error_fields(error: KafkaError | None) -> dict[str, Any]:
    if error is None:
        return {"error_code": ErrorCode.none, "error_message": None}
    return {"error_code": error.error_code, "error_message": error.message}


def _check(context: ControllerRequestContext) -> None:
    authorize_cluster_operation(context, AclOperation.ALTER)
    if context.authorizer is None:
        raise SecurityDisabledError("No Authorizer is configured.")


async def describe_acls(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    return acl_apis.describe_acls(context, request)


async def create_acls(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    _check(context)
    acls = [
        StandardAcl(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        for c in request.creations
    ]
    errors = await context.controller.create_acls(acls)
    return {"throttle_time": 0, "results": [_error_fields(e) for e in errors]}


async def delete_acls(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    _check(context)
    filters = [
        AclBindingFilter(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )
        for f in request.filters
    ]
    results = await context.controller.delete_acls(filters)
    return {
        "throttle_time": 0,
        "filter_results": [
            {
                **_error_fields(r.error),
                "matching_acls": [
                    {
                        **_error_fields(None),
                        "resource_type": a.resource_type,
                        "resource_name": a.resource_name,
                        "pattern_type": a.pattern_type,
                        "principal": a.principal,
                        "host": a.host,
                        "operation": a.operation,
                        "permission_type": a.permission_type,
                    }
                    for a in r.deleted
                ],
            }
            for r in results
        ],
    }
