"""The authorizer a node is configured with (`authorizer.class.name`), Kafka's
Authorizer interface cut to what Tiercel calls, and its standard implementation.

`authorizer.class.name`:
- empty (the default): no authorization; every request is served as today;
- `org.apache.kafka.metadata.authorizer.StandardAuthorizer` or
  `kafka.security.authorizer.AclAuthorizer` (the ZooKeeper-era name, same behaviour
  here): `StandardAuthorizer`, ACLs from the cluster metadata;
- `module:Class`: a user's own class, built with no arguments, then `configure`d with
  the node's settings; it implements `Authorizer` below.

`Authorizer` (the interface a user's class implements):
- ``configure(configs)``: the broker's settings by Kafka name (``super.users``,
  ``allow.everyone.if.no.acl.found``, ``node.id`` and the rest);
- ``authorize(principal, host, operation, resource_type, resource_name) -> bool``:
  principal as "User:alice", host the client's IP address, resource literal;
- ``authorize_by_resource_type(principal, host, operation, resource_type) -> bool``;
- ``acls(filter) -> list[StandardAcl]`` (DescribeAcls);
- ``update_acls(acls)``: every ACL of the cluster by id, called whenever they change
  (Kafka's AclPublisher loading the image into its authorizer).
Calls come from the node's event loop and must not block it.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Mapping
from typing import Final, Protocol

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError
from tiercel.server.authorizer.acl import (
    AclBindingFilter,
    AclOperation,
    ResourceType,
    parse_principal,
)
from tiercel.server.authorizer.standard_authorizer_data import StandardAuthorizerData
from tiercel.server.metadata.image.acls import StandardAcl

__all__ = ["STANDARD_AUTHORIZER_NAMES", "Authorizer", "StandardAuthorizer", "load_authorizer"]

STANDARD_AUTHORIZER_NAMES: Final = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
    }
)


class Authorizer(Protocol):
    def configure(self, configs: Mapping[str, object]) -> None: ...

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool: ...

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool: ...

    def acls(self, acl_filter: AclBindingFilter) -> list[StandardAcl]: ...

    def update_acls(self, acls: Mapping[uuid.UUID, StandardAcl]) -> None: ...


def super_users(value: str) -> frozenset[str]:
    """`super.users` as Kafka's StandardAuthorizer.getConfiguredSuperUsers reads it:
    semicolon-separated principals, blanks ignored, each "Type:name"."""
    users = frozenset(v.strip() for v in value.split(";") if v.strip())
    for user in users:
        try:
            parse_principal(user)
        except ValueError as e:
            raise ConfigError(f"Invalid value {value} for configuration super.users: {e}") from e
    return users


class StandardAuthorizer:
    """Kafka's StandardAuthorizer: ACLs from the metadata image, super users and the
    no-ACL default from the settings. Event-loop only; `_data` is replaced, never
    changed, so a decision sees one consistent set of ACLs."""

    def __init__(self) -> None:
        self._data = StandardAuthorizerData.EMPTY

    def configure(self, configs: Mapping[str, object]) -> None:
        self._data = StandardAuthorizerData(
            self._data.acls_by_id,
            super_users(str(configs.get("super.users") or "")),
            bool(configs.get("allow.everyone.if.no.acl.found")),
        )

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        return self._data.authorize(principal, host, operation, resource_type, resource_name)

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        return self._data.authorize_by_resource_type(principal, host, operation, resource_type)

    def acls(self, acl_filter: AclBindingFilter) -> list[StandardAcl]:
        return self._data.acls(acl_filter)

    def update_acls(self, acls: Mapping[uuid.UUID, StandardAcl]) -> None:
        self._data = self._data.with_acls(acls)


def load_authorizer(config: BrokerConfig) -> Authorizer | None:
    """The node's authorizer, configured; None when `authorizer.class.name` is empty.
    A node without `process.roles` cannot have one: ACLs live in the KRaft metadata
    log only."""
    name = str(config.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if not config.kraft_mode:
        raise ConfigError(
            "authorizer.class.name needs the KRaft metadata log, where ACLs are stored: run "
            "this node as a KRaft node (process.roles=broker,controller after `tiercel "
            "storage format`)"
        )
    authorizer: Authorizer
    if name in STANDARD_AUTHORIZER_NAMES:
        authorizer = StandardAuthorizer()
    elif ":" in name:
        module_name, _, class_name = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"authorizer.class.name {name}: cannot load it: {e}") from e
        authorizer = cls()
    else:
        raise ConfigError(
            f"authorizer.class.name {name} is not supported: use "
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer or module:Class"
        )
    authorizer.configure(
        {
            **{key: config.get(key) for key in sorted(config.explicit)},
            "super.users": config.get("super.users"),
            "allow.everyone.if.no.acl.found": config.get("allow.everyone.if.no.acl.found"),
            "node.id": config.node_id,
        }
    )
    return authorizer
