"""The controller's ACLs (Kafka's AclControlManager): CreateAcls and DeleteAcls turned
into AccessControlEntryRecords and RemoveAccessControlEntryRecords, and the replay of
both.

Validation and results are Kafka's: a binding with an UNKNOWN or ANY resource type,
operation or permission, a pattern type other than LITERAL or PREFIXED, or an empty
resource name fails alone with INVALID_REQUEST (its message Kafka's); so does a
principal not of the form "Type:name" (SecurityUtils.parseKafkaPrincipal's message) and
a CLUSTER resource not named kafka-cluster (AclApis.handleCreateAcls); creating an ACL
that exists succeeds without a record. A filter with an UNKNOWN code fails alone with
INVALID_REQUEST; each other filter answers the ACLs it matched, which one atomic batch
removes (an ACL matched by two filters removed once). Kafka bounds one operation to
10000 records (QuorumController's MAX_RECORDS_PER_USER_OP, BoundedListTooLongException).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.errors import ErrorCode, InvalidRequestError, KafkaError
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.security_records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
)
from tiercel.server.authorizer.acl import (
    CLUSTER_NAME,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    known,
    parse_principal,
)
from tiercel.server.controller.controller_result import ControllerResult
from tiercel.server.metadata.image.acls import StandardAcl

__all__ = ["AclControlManager", "AclDeleteResult", "BoundedListTooLongError"]

_log: Final = logging.getLogger("tiercel.controller.acls")

MAX_RECORDS_PER_USER_OP: Final = 10000


class BoundedListTooLongError(KafkaError):
    """Kafka's BoundedListTooLongException, which the controller answers as
    UNKNOWN_SERVER_ERROR (it is not an ApiException)."""

    error_code = ErrorCode.unknown_server_error


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    """One filter's answer: the ACLs it removed, or why it failed. A value."""

    deleted: tuple[StandardAcl, ...] = ()
    error: KafkaError | None = None


def validate_new_acl(acl: StandardAcl) -> None:
    """AclApis.handleCreateAcls's checks (the cluster resource's name, an empty name),
    then Kafka's AclControlManager.validateNewAcl, then the principal's form."""
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise InvalidRequestError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not acl.resource_name:
        raise InvalidRequestError("Invalid empty resource name")
    resource_type = known(ResourceType, acl.resource_type)
    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidRequestError(f"Invalid resourceType {resource_type.name}")
    pattern_type = known(PatternType, acl.pattern_type)
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidRequestError(f"Invalid patternType {pattern_type.name}")
    operation = known(AclOperation, acl.operation)
    if operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidRequestError(f"Invalid operation {operation.name}")
    permission_type = known(AclPermissionType, acl.permission_type)
    if permission_type not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        raise InvalidRequestError(f"Invalid permissionType {permission_type.name}")
    try:
        parse_principal(acl.principal)
    except ValueError as e:
        raise InvalidRequestError(str(e)) from e


class AclControlManager:
    """Event-loop only (the controller's). Invariant: ``existing`` holds exactly the
    values of ``id_to_acl``."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self.id_to_acl: dict[uuid.UUID, StandardAcl] = {}
        self._existing: dict[StandardAcl, uuid.UUID] = {}
        self.version = 0
        """Bumped by every replay: the controller's authorizer reloads when it moves."""

    def create_acls(self, acls: Sequence[StandardAcl]) -> ControllerResult[list[KafkaError | None]]:
        results: list[KafkaError | None] = []
        records: list[ApiMessageAndVersion] = []
        created: set[StandardAcl] = set()
        for acl in acls:
            try:
                validate_new_acl(acl)
            except KafkaError as e:
                results.append(e)
                continue
            if acl not in self._existing and acl not in created:
                created.add(acl)
                records.append(ApiMessageAndVersion(acl.to_record(self._new_acl_id()), 0))
            results.append(None)
        if len(records) > MAX_RECORDS_PER_USER_OP:
            raise BoundedListTooLongError(
                f"Cannot create more than {MAX_RECORDS_PER_USER_OP} acls in a single operation."
            )
        return ControllerResult(records, results)

    def delete_acls(
        self, filters: Sequence[AclBindingFilter]
    ) -> ControllerResult[list[AclDeleteResult]]:
        results: list[AclDeleteResult] = []
        removed: set[uuid.UUID] = set()
        for acl_filter in filters:
            if acl_filter.is_unknown():
                unknown_pattern = acl_filter.unknown_pattern()
                message = "Unknown patternFilter." if unknown_pattern else "Unknown entryFilter."
                results.append(AclDeleteResult(error=InvalidRequestError(message)))
                continue
            matched = [(i, a) for i, a in self.id_to_acl.items() if acl_filter.matches(a)]
            if len(removed.union(i for i, _ in matched)) > MAX_RECORDS_PER_USER_OP:
                error = BoundedListTooLongError(
                    f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls in a single "
                    "delete operation."
                )
                results.append(AclDeleteResult(error=error))
                continue
            removed.update(i for i, _ in matched)
            results.append(AclDeleteResult(tuple(a for _, a in matched)))
        records = [
            ApiMessageAndVersion(RemoveAccessControlEntryRecord(id=acl_id), 0)
            for acl_id in sorted(removed)
        ]
        return ControllerResult(records, results)

    def _new_acl_id(self) -> uuid.UUID:
        while True:
            acl_id = uuid.UUID(int=self._rng.getrandbits(128), version=4)
            if acl_id not in self.id_to_acl:
                return acl_id

    def replay(self, record: AccessControlEntryRecord) -> None:
        acl = StandardAcl.from_record(record)
        self.id_to_acl[record.id] = acl
        self._existing[acl] = record.id
        self.version += 1
        _log.info("Replayed AccessControlEntryRecord for %s, setting %s", record.id, acl)

    def replay_remove(self, record: RemoveAccessControlEntryRecord) -> None:
        acl = self.id_to_acl.pop(record.id, None)
        if acl is None:
            raise RuntimeError(f"Unable to replay {record}: no acl with that ID found.")
        del self._existing[acl]
        self.version += 1
        _log.info("Replayed RemoveAccessControlEntryRecord for %s, removing %s", record.id, acl)

    def records(self) -> list[ApiMessageAndVersion]:
        return [ApiMessageAndVersion(acl.to_record(i), 0) for i, acl in self.id_to_acl.items()]
