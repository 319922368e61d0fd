"""The ACLs an authorizer decides with, indexed for lookup by resource (Kafka's
StandardAuthorizerData with its AclCache), and the decision rules of Kafka's
StandardAuthorizerData.authorize/findResult and Authorizer.authorizeByResourceType.

The rules, as Kafka's:
- a super user (its "Type:name" in `super.users`) may do anything;
- the ACLs that apply to a resource are the literal ones of its name, the literal
  wildcard "*" and the prefixed ones whose name starts the resource's name;
- of those, the ones whose principal is the caller's or "User:*" and whose host is the
  caller's or "*" decide: any DENY for the operation (or ALL) denies, else any ALLOW
  for it allows; an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, an
  ALLOW of ALTER_CONFIGS also DESCRIBE_CONFIGS (a DENY implies nothing);
- a resource no ACL applies to at all (whoever its principal) is allowed only with
  `allow.everyone.if.no.acl.found`.

Lookups cost dictionary probes: the literal name, the wildcard, and one probe per
distinct prefix length present, never a scan of every ACL.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from tiercel.server.authorizer.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tiercel.server.metadata.image.acls import StandardAcl

__all__ = ["StandardAuthorizerData"]

_IMPLIES_DESCRIBE: Final = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    }
)
_IMPLIES_DESCRIBE_CONFIGS: Final = frozenset(
    {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
)


@dataclass(frozen=True, slots=True)
class _TypeAcls:
    """The ACLs of one resource type: literal and prefixed ones by resource name."""

    literal: Mapping[str, tuple[StandardAcl, ...]]
    prefixed: Mapping[str, tuple[StandardAcl, ...]]
    prefix_lengths: tuple[int, ...]

    def applicable(self, name: str) -> Iterable[tuple[StandardAcl, ...]]:
        found = self.literal.get(name)
        if found:
            yield found
        if name != WILDCARD:
            found = self.literal.get(WILDCARD)
            if found:
                yield found
        for length in self.prefix_lengths:
            if length > len(name):
                break
            found = self.prefixed.get(name[:length])
            if found:
                yield found


def _index(acls: Iterable[StandardAcl]) -> dict[int, _TypeAcls]:
    literal: defaultdict[int, defaultdict[str, list[StandardAcl]]] = defaultdict(
        lambda: defaultdict(list)
    )
    prefixed: defaultdict[int, defaultdict[str, list[StandardAcl]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for acl in acls:
        target = literal if acl.pattern_type == PatternType.LITERAL else prefixed
        target[acl.resource_type][acl.resource_name].append(acl)
    return {
        resource_type: _TypeAcls(
            {k: tuple(v) for k, v in literal[resource_type].items()},
            {k: tuple(v) for k, v in prefixed[resource_type].items()},
            tuple(sorted({len(k) for k in prefixed[resource_type]})),
        )
        for resource_type in {*literal, *prefixed}
    }


def _result(acl: StandardAcl, principal: str, host: str, operation: int) -> bool | None:
    """Kafka's StandardAuthorizerData.findResult: True (allow), False (deny) or None
    when the ACL does not speak for this principal, host and operation."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    allow = acl.permission_type == AclPermissionType.ALLOW
    if acl.operation != AclOperation.ALL:
        if not allow or operation not in (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS):
            if acl.operation != operation:
                return None
        elif operation == AclOperation.DESCRIBE:
            if acl.operation not in _IMPLIES_DESCRIBE:
                return None
        elif acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
            return None
    return allow


def _speaks_for(acl: StandardAcl, principal: str, host: str, operation: int) -> bool:
    """Whether ``acl`` is about this principal, host and operation, as the default
    Authorizer.authorizeByResourceType filters them (no implied operations)."""
    return (
        acl.host in (host, WILDCARD)
        and acl.principal in (principal, WILDCARD_PRINCIPAL)
        and acl.operation in (operation, AclOperation.ALL)
    )


class _Patterns:
    """The resource names one principal is allowed and denied an operation on, by
    pattern type (Authorizer.authorizeByResourceType's denyPatterns, allowPatterns)."""

    def __init__(self) -> None:
        self.deny_literal: set[str] = set()
        self.deny_prefixed: set[str] = set()
        self.allow: list[tuple[int, str]] = []
        self.wildcard_deny = False

    def add(self, pattern_type: int, name: str, permission_type: int) -> None:
        if permission_type == AclPermissionType.DENY:
            if pattern_type == PatternType.PREFIXED:
                self.deny_prefixed.add(name)
            elif name == WILDCARD:
                self.wildcard_deny = True
            else:
                self.deny_literal.add(name)
        elif permission_type == AclPermissionType.ALLOW:
            self.allow.append((pattern_type, name))

    def allows(self) -> bool:
        """A wildcard DENY denies; a wildcard ALLOW allows; else any ALLOW not dominated
        by a DENY of the same literal name or of a prefix of its name allows."""
        if self.wildcard_deny:
            return False
        if (PatternType.LITERAL, WILDCARD) in self.allow:
            return True
        for pattern_type, name in self.allow:
            if pattern_type == PatternType.LITERAL and name in self.deny_literal:
                continue
            if not any(name[:i] in self.deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False


class StandardAuthorizerData:
    """Immutable; any thread. A new one replaces it when the ACLs or settings change."""

    EMPTY: StandardAuthorizerData

    def __init__(
        self,
        acls: Mapping[uuid.UUID, StandardAcl],
        super_users: frozenset[str],
        allow_everyone_if_no_acl_found: bool,
    ) -> None:
        self.acls_by_id = acls
        self.super_users = super_users
        self.default_result = allow_everyone_if_no_acl_found
        self._by_type = _index(acls.values())

    def with_acls(self, acls: Mapping[uuid.UUID, StandardAcl]) -> StandardAuthorizerData:
        return StandardAuthorizerData(acls, self.super_users, self.default_result)

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        """``principal``: "Type:name"; ``host``: the client's IP address."""
        if principal in self.super_users:
            return True
        type_acls = self._by_type.get(resource_type)
        if type_acls is None:
            return self.default_result
        has_resource_acls = False
        allowed = False
        for acls in type_acls.applicable(resource_name):
            has_resource_acls = True
            for acl in acls:
                result = _result(acl, principal, host, operation)
                if result is False:
                    return False
                allowed = allowed or result is True
        if allowed:
            return True
        return self.default_result if not has_resource_acls else False

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """May ``principal`` do ``operation`` on some resource of the type? Kafka's
        Authorizer.authorizeByResourceType: yes for a super user (or when a made-up name
        is allowed, e.g. by allow.everyone.if.no.acl.found); otherwise yes if an ALLOW
        for it is not dominated by a DENY (a literal of the same name, a prefix of it, or
        the literal wildcard)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        type_acls = self._by_type.get(resource_type)
        if type_acls is None:
            return False
        patterns = _Patterns()
        for pattern_type, by_name in (
            (PatternType.LITERAL, type_acls.literal),
            (PatternType.PREFIXED, type_acls.prefixed),
        ):
            for name, acls in by_name.items():
                for acl in acls:
                    if _speaks_for(acl, principal, host, operation):
                        patterns.add(pattern_type, name, acl.permission_type)
        return patterns.allows()

    def acls(self, acl_filter: AclBindingFilter) -> list[StandardAcl]:
        """The ACLs the filter matches (Kafka's AclCache.acls)."""
        return [acl for acl in self.acls_by_id.values() if acl_filter.matches(acl)]


StandardAuthorizerData.EMPTY = StandardAuthorizerData({}, frozenset(), False)
