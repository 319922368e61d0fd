"""ACL values: Kafka's ResourceType, PatternType, AclOperation and AclPermissionType
codes, the filter CreateAcls' opposite numbers (DescribeAcls, DeleteAcls) carry
(Kafka's AclBindingFilter = ResourcePatternFilter + AccessControlEntryFilter), and
principal strings ("User:alice") as Kafka's SecurityUtils.parseKafkaPrincipal reads them.

A binding is the metadata image's `StandardAcl` (the record's fields, codes as ints), so
a binding, a record and an image entry are one value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final, TypeVar

from tiercel.server.metadata.image.acls import StandardAcl

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
    "known",
    "parse_principal",
    "supported_operations",
]


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME: Final = "kafka-cluster"
WILDCARD: Final = "*"
WILDCARD_PRINCIPAL: Final = "User:*"

_O = AclOperation
# Kafka's AclEntry.supportedOperations: what authorized_operations bit fields report.
_SUPPORTED: Final[dict[ResourceType, tuple[AclOperation, ...]]] = {
    ResourceType.TOPIC: (
        _O.READ,
        _O.WRITE,
        _O.CREATE,
        _O.DELETE,
        _O.ALTER,
        _O.DESCRIBE,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (_O.READ, _O.DELETE, _O.DESCRIBE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (
        _O.CREATE,
        _O.ALTER,
        _O.DESCRIBE,
        _O.CLUSTER_ACTION,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
        _O.IDEMPOTENT_WRITE,
    ),
    ResourceType.TRANSACTIONAL_ID: (_O.WRITE, _O.DESCRIBE),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}


_Code = TypeVar("_Code", ResourceType, PatternType, AclOperation, AclPermissionType)


def known(enum: type[_Code], code: int) -> _Code:
    """``code`` as ``enum``'s member, UNKNOWN (0) for a code it does not have (Kafka's
    fromCode)."""
    try:
        return enum(code)
    except ValueError:
        return enum(0)


def supported_operations(resource_type: ResourceType) -> tuple[AclOperation, ...]:
    return _SUPPORTED[resource_type]


def parse_principal(principal: str) -> tuple[str, str]:
    """(type, name) of "type:name", as Kafka's SecurityUtils.parseKafkaPrincipal; raises
    ValueError with its message."""
    principal_type, colon, name = principal.partition(":")
    if not colon:
        raise ValueError(
            "expected a string in format principalType:principalName but got " + principal
        )
    return principal_type, name


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None for a name, principal or host matches any; ANY
    codes match any; pattern type MATCH matches the ACLs that would apply to the named
    resource (literal of that name, the literal wildcard, prefixes of the name). A value;
    any thread."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    def is_unknown(self) -> bool:
        """An UNKNOWN code in the pattern or entry part (Kafka's isUnknown; a code Kafka
        does not know reads as UNKNOWN, as its fromCode methods have it)."""
        return self.unknown_pattern() or (
            known(AclOperation, self.operation) == AclOperation.UNKNOWN
            or known(AclPermissionType, self.permission_type) == AclPermissionType.UNKNOWN
        )

    def unknown_pattern(self) -> bool:
        return (
            known(ResourceType, self.resource_type) == ResourceType.UNKNOWN
            or known(PatternType, self.pattern_type) == PatternType.UNKNOWN
        )

    def matches(self, acl: StandardAcl) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: StandardAcl) -> bool:
        # Kafka's ResourcePatternFilter.matches.
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        name = self.resource_name
        if name is None:
            return True
        if pattern in (PatternType.ANY, acl.pattern_type):
            return name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD
        return name.startswith(acl.resource_name)

    def _matches_entry(self, acl: StandardAcl) -> bool:
        # Kafka's AccessControlEntryFilter.matches.
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation not in (AclOperation.ANY, acl.operation):
            return False
        return self.permission_type in (AclPermissionType.ANY, acl.permission_type)
