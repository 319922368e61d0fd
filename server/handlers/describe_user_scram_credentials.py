"""DescribeUserScramCredentials (50): which SCRAM mechanisms each user has, with their
iterations, never a salt or key (KIP-554).

A broker answers from its metadata image, as Kafka's ``KafkaApis`` does through
``metadataCache.describeScramCredentials`` (``ScramImage.describe``): no users (null or
empty) means every user; a user named twice gets DUPLICATE_RESOURCE, a named user with
no credential RESOURCE_NOT_FOUND, each with Kafka's message. A node without
process.roles keeps no credentials, so it knows no user.
"""

from __future__ import annotations

from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.request_context import RequestContext

API_KEY: Final = 50
MIN_VERSION: Final = 0
MAX_VERSION: Final = 0

_DUPLICATE: Final = (
    "Cannot describe SCRAM credentials for the same user twice in a single request: "
)
_NOT_FOUND: Final = "Attempt to describe a user credential that does not exist: "


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not authorize(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # KafkaApis.handleDescribeUserScramCredentialsRequest answers with
        # DescribeUserScramCredentialsRequest.getErrorResponse: the error at the top and
        # on a result for every user named, whose user name Kafka leaves empty.
        error = ErrorCode.cluster_authorization_failed
        return {
            "throttle_time": 0,
            "error_code": error,
            "error_message": None,
            "results": [
                {"user": "", "error_code": error, "error_message": None, "credential_infos": []}
                for _ in request.users or ()
            ],
        }
    mechanisms = ctx.broker.credential_cache.scram_image.mechanisms
    duplicated: dict[str, bool] = {}
    if request.users:
        for user in request.users:
            duplicated[user.name] = user.name in duplicated
    else:
        for users in mechanisms.values():
            duplicated.update(dict.fromkeys(users, False))
    results = []
    for user, duplicate in duplicated.items():
        infos = [
            {"mechanism": mechanism, "iterations": users[user].iterations}
            for mechanism, users in sorted(mechanisms.items())
            if user in users
        ]
        if duplicate:
            error, message = ErrorCode.duplicate_resource, _DUPLICATE + user
        elif not infos:
            error, message = ErrorCode.resource_not_found, _NOT_FOUND + user
        else:
            error, message = ErrorCode.none, None
        results.append(
            {
                "user": user,
                "error_code": error,
                "error_message": message,
                "credential_infos": infos if error is ErrorCode.none else [],
            }
        )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "results": results,
    }
