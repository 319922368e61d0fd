"""The ACLs of the metadata image, by id, and changes to them (Kafka's StandardAcl,
AclsImage and AclsDelta; KIP-801's StandardAuthorizer reads them).

The enum fields keep Kafka's codes as the records carry them: ResourceType (2 TOPIC, 3
GROUP, 4 CLUSTER...), PatternType (3 LITERAL, 4 PREFIXED), AclOperation (2 ALL, 3
READ...), AclPermissionType (2 DENY, 3 ALLOW); the authorizer interprets them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.security_records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
)
from tiercel.server.metadata.image.errors import MetadataReplayError
from tiercel.server.metadata.image.image_writer import ImageWriter, ImageWriterOptions
from tiercel.server.metadata.image.map_changes import apply_changes

__all__ = ["AclsDelta", "AclsImage", "StandardAcl"]


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL: who ("User:alice") may or may not do what, from where, on which
    resources. A value; any thread."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    @classmethod
    def from_record(cls, record: AccessControlEntryRecord) -> StandardAcl:
        return cls(
            record.resource_type,
            record.resource_name,
            record.pattern_type,
            record.principal,
            record.host,
            record.operation,
            record.permission_type,
        )

    def to_record(self, acl_id: uuid.UUID) -> AccessControlEntryRecord:
        return AccessControlEntryRecord(
            id=acl_id,
            resource_type=self.resource_type,
            resource_name=self.resource_name,
            pattern_type=self.pattern_type,
            principal=self.principal,
            host=self.host,
            operation=self.operation,
            permission_type=self.permission_type,
        )


@dataclass(frozen=True, slots=True)
class AclsImage:
    """Every ACL by its id. A value; any thread."""

    EMPTY: ClassVar[AclsImage]

    acls: Mapping[uuid.UUID, StandardAcl]

    def is_empty(self) -> bool:
        return not self.acls

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        for acl_id, acl in self.acls.items():
            writer.write(ApiMessageAndVersion(acl.to_record(acl_id), 0))


AclsImage.EMPTY = AclsImage(MappingProxyType({}))


class AclsDelta:
    """ACLs added (by id) and removed (None), in the order they changed. Not
    thread-safe: one replayer builds a delta."""

    def __init__(self, image: AclsImage) -> None:
        self.image = image
        self.changes: dict[uuid.UUID, StandardAcl | None] = {}

    def replay(self, record: AccessControlEntryRecord | RemoveAccessControlEntryRecord) -> None:
        if isinstance(record, AccessControlEntryRecord):
            self.changes[record.id] = StandardAcl.from_record(record)
        elif record.id in self.image.acls:
            self.changes[record.id] = None
        elif record.id in self.changes:
            # Added and removed within this delta: nothing to tell.
            del self.changes[record.id]
        else:
            raise MetadataReplayError(
                f"Failed to find existing ACL with ID {record.id} in either image or changes"
            )

    def finish_snapshot(self) -> None:
        for acl_id in self.image.acls:
            self.changes.setdefault(acl_id, None)

    def apply(self) -> AclsImage:
        return AclsImage(apply_changes(self.image.acls, self.changes))
