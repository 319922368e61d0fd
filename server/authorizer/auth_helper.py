"""What handlers call to authorize a request (Kafka's AuthHelper): one decision per
resource named in the request, never per record or partition.

Without an authorizer every call answers "allowed" after one attribute check, so a node
without `authorizer.class.name` does no authorization work. Denials the client asked
for explicitly are logged at INFO (Kafka's kafka.authorizer.logger, logIfDenied);
filtering (ListGroups, authorized operations) is not.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, Protocol

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import ClusterAuthorizationFailedError
from tiercel.server.authorizer.acl import (
    CLUSTER_NAME,
    AclOperation,
    ResourceType,
    supported_operations,
)

if TYPE_CHECKING:
    from tiercel.server.authorizer.authorizer import Authorizer
    from tiercel.server.network.principal_builder import KafkaPrincipal

__all__ = [
    "UNSET_OPERATIONS",
    "Caller",
    "authorize",
    "authorize_by_resource_type",
    "authorize_cluster_operation",
    "authorized_operations",
    "client_host",
    "filter_by_authorized",
]

_log: Final = logging.getLogger("tiercel.authorizer")

UNSET_OPERATIONS: Final = -(2**31)
"""Kafka's Int.MinValue: authorized operations not asked for."""


class Caller(Protocol):
    """Who is asking, as an authorizer sees it: what `RequestContext` and the
    controller's request context both provide."""

    @property
    def principal(self) -> KafkaPrincipal: ...

    @property
    def client_address(self) -> str: ...

    @property
    def authorizer(self) -> Authorizer | None: ...


def client_host(client_address: str) -> str:
    """The client's IP address of a connection's "host:port" (IPv6 unbracketed), as
    Java's InetAddress.getHostAddress writes it, which ACL hosts are compared with: an
    IPv6 address with all eight groups, each without leading zeros ("0:0:0:0:0:0:0:1",
    where Python writes "::1")."""
    host = client_address.rpartition(":")[0]
    if ":" not in host:
        return host
    try:
        exploded = ipaddress.IPv6Address(host.partition("%")[0]).exploded
    except ValueError:
        return host
    return ":".join(format(int(group, 16), "x") for group in exploded.split(":"))


def authorize(
    ctx: Caller,
    operation: AclOperation,
    resource_type: ResourceType,
    resource_name: str,
    log_if_denied: bool = True,
) -> bool:
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    principal = str(ctx.principal)
    allowed = authorizer.authorize(
        principal, client_host(ctx.client_address), operation, resource_type, resource_name
    )
    if not allowed and log_if_denied:
        log_event(
            _log,
            logging.INFO,
            "authorization_denied",
            principal=principal,
            client=ctx.client_address,
            operation=operation.name,
            resource=f"{resource_type.name}:{resource_name}",
        )
    return allowed


def authorize_cluster_operation(ctx: Caller, operation: AclOperation) -> None:
    """Kafka's authorizeClusterOperation: CLUSTER_AUTHORIZATION_FAILED unless allowed."""
    if not authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        raise ClusterAuthorizationFailedError("Cluster authorization failed.")


def filter_by_authorized(
    ctx: Caller,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
    log_if_denied: bool = True,
) -> set[str]:
    """The names among ``names`` the caller may do ``operation`` on, each decided once."""
    unique = set(names)
    if ctx.authorizer is None:
        return unique
    return {n for n in unique if authorize(ctx, operation, resource_type, n, log_if_denied)}


def authorize_by_resource_type(
    ctx: Caller, operation: AclOperation, resource_type: ResourceType
) -> bool:
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(
        str(ctx.principal), client_host(ctx.client_address), operation, resource_type
    )


def authorized_operations(ctx: Caller, resource_type: ResourceType, name: str) -> int:
    """Kafka's AuthHelper.authorizedOperations: a bit per operation code the caller may
    do on the resource, among the type's supported ones (all of them without an
    authorizer)."""
    bits = 0
    for operation in supported_operations(resource_type):
        if authorize(ctx, operation, resource_type, name, log_if_denied=False):
            bits |= 1 << operation
    return bits
