"""The metadata records of security state: ACLs (KIP-801's StandardAuthorizer), SCRAM
credentials (KIP-554) and delegation tokens (KIP-48), as Kafka 4.0's schemas declare
them.

    18 AccessControlEntryRecord          v0: Id uuid, ResourceType int8, ResourceName
                                         string, PatternType int8, Principal string,
                                         Host string, Operation int8, PermissionType int8
    19 RemoveAccessControlEntryRecord    v0: Id uuid
    11 UserScramCredentialRecord         v0: Name string, Mechanism int8, Salt bytes,
                                         StoredKey bytes, ServerKey bytes, Iterations
                                         int32
    22 RemoveUserScramCredentialRecord   v0: Name string, Mechanism int8
    10 DelegationTokenRecord             v0: Owner string, Requester string, Renewers
                                         []string, IssueTimestamp int64, MaxTimestamp
                                         int64, ExpirationTimestamp int64, TokenId string
    26 RemoveDelegationTokenRecord       v0: TokenId string

The int8 codes are Kafka's: ResourceType, PatternType, AclOperation and
AclPermissionType codes for ACLs, ScramMechanism types (1 SCRAM-SHA-256, 2
SCRAM-SHA-512) for credentials. Principals are "Type:name" strings.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tiercel.protocol.metadata.field_types import (
    BYTES,
    INT8,
    INT32,
    INT64,
    STRING,
    STRING_ARRAY,
    UUID,
)
from tiercel.protocol.metadata.message_schema import MetadataRecord, metadata_record, schema_field

__all__ = [
    "AccessControlEntryRecord",
    "DelegationTokenRecord",
    "RemoveAccessControlEntryRecord",
    "RemoveDelegationTokenRecord",
    "RemoveUserScramCredentialRecord",
    "UserScramCredentialRecord",
]


@metadata_record(api_key=18, versions="0")
@dataclass(frozen=True, kw_only=True)
class AccessControlEntryRecord(MetadataRecord):
    """An ACL, identified by its id."""

    id: uuid.UUID = schema_field(UUID)
    resource_type: int = schema_field(INT8)
    resource_name: str = schema_field(STRING)
    pattern_type: int = schema_field(INT8)
    principal: str = schema_field(STRING)
    host: str = schema_field(STRING)
    operation: int = schema_field(INT8)
    permission_type: int = schema_field(INT8)


@metadata_record(api_key=19, versions="0")
@dataclass(frozen=True, kw_only=True)
class RemoveAccessControlEntryRecord(MetadataRecord):
    """An ACL removed."""

    id: uuid.UUID = schema_field(UUID)


@metadata_record(api_key=11, versions="0")
@dataclass(frozen=True, kw_only=True)
class UserScramCredentialRecord(MetadataRecord):
    """A user's SCRAM credential for one mechanism (RFC 5802's salt, keys, iterations)."""

    name: str = schema_field(STRING)
    mechanism: int = schema_field(INT8)
    salt: bytes = schema_field(BYTES)
    stored_key: bytes = schema_field(BYTES)
    server_key: bytes = schema_field(BYTES)
    iterations: int = schema_field(INT32)


@metadata_record(api_key=22, versions="0")
@dataclass(frozen=True, kw_only=True)
class RemoveUserScramCredentialRecord(MetadataRecord):
    """A user's SCRAM credential for one mechanism removed."""

    name: str = schema_field(STRING)
    mechanism: int = schema_field(INT8)


@metadata_record(api_key=10, versions="0")
@dataclass(frozen=True, kw_only=True)
class DelegationTokenRecord(MetadataRecord):
    """A delegation token (created or renewed)."""

    owner: str = schema_field(STRING)
    requester: str = schema_field(STRING)
    renewers: tuple[str, ...] = schema_field(STRING_ARRAY)
    issue_timestamp: int = schema_field(INT64)
    max_timestamp: int = schema_field(INT64)
    expiration_timestamp: int = schema_field(INT64)
    token_id: str = schema_field(STRING)


@metadata_record(api_key=26, versions="0")
@dataclass(frozen=True, kw_only=True)
class RemoveDelegationTokenRecord(MetadataRecord):
    """A delegation token removed (expired or cancelled)."""

    token_id: str = schema_field(STRING)
