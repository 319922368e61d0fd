"""SCRAM credentials in the controller (Kafka's ``ScramControlManager``, KIP-554).

AlterUserScramCredentials carries, per user, deletions (user, mechanism) and upsertions
(user, mechanism, iterations, salt, salted password — the client salts and hashes the
password, so it never reaches the broker). Each is checked as Kafka checks it: an empty
name is UNACCEPTABLE_CREDENTIAL, an unknown mechanism type UNSUPPORTED_SASL_MECHANISM,
iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL, deleting a credential that does
not exist RESOURCE_NOT_FOUND, and a user named twice in one request DUPLICATE_RESOURCE
for all of that user's alterations; below metadata.version 3.5-IV2 there is no SCRAM
record, so every alteration is UNSUPPORTED_VERSION. Accepted upsertions become
UserScramCredentialRecords holding StoredKey and ServerKey (derived here from the salted
password, which is not kept) and deletions RemoveUserScramCredentialRecords, all in one
atomic batch. Event-loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.metadata_version import MetadataVersion
from tiercel.protocol.metadata.security_records import (
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from tiercel.protocol.sasl.scram_credential import ScramCredentialData
from tiercel.protocol.sasl.scram_formatter import MAX_ITERATIONS, ScramMechanism
from tiercel.server.controller.controller_result import ControllerResult

__all__ = [
    "ScramControlManager",
    "ScramCredentialDeletion",
    "ScramCredentialUpsertion",
    "UserScramResult",
]

_log = logging.getLogger(__name__)
_DUPLICATE = "A user credential cannot be altered twice in the same request"
_NO_SCRAM = "The current metadata.version does not support SCRAM"


@dataclass(frozen=True, slots=True)
class ScramCredentialDeletion:
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ScramCredentialUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return f"ScramCredentialUpsertion(name={self.name}, mechanism={self.mechanism})"


@dataclass(frozen=True, slots=True)
class UserScramResult:
    user: str
    error_code: ErrorCode
    error_message: str | None = None


class ScramControlManager:
    """Credentials by (user, mechanism type), as replayed from the log."""

    def __init__(self) -> None:
        self._credentials: dict[tuple[str, int], ScramCredentialData] = {}

    def alter_credentials(
        self,
        deletions: Sequence[ScramCredentialDeletion],
        upsertions: Sequence[ScramCredentialUpsertion],
        metadata_version: MetadataVersion,
    ) -> ControllerResult[list[UserScramResult]]:
        """Kafka's ``alterCredentials``: deletions are checked first, then upsertions;
        one dict of accepted alterations stands for Kafka's two, which it checks together."""
        supported = metadata_version.is_scram_supported()
        accepted: dict[str, ScramCredentialDeletion | ScramCredentialUpsertion] = {}
        errors: dict[str, UserScramResult] = {}
        alterations: list[ScramCredentialDeletion | ScramCredentialUpsertion] = [
            *deletions,
            *upsertions,
        ]
        for alteration in alterations:
            name = alteration.name
            if name in errors:
                continue
            if accepted.pop(name, None) is not None:
                errors[name] = UserScramResult(name, ErrorCode.duplicate_resource, _DUPLICATE)
            elif not supported:
                errors[name] = UserScramResult(name, ErrorCode.unsupported_version, _NO_SCRAM)
            elif (error := self._validate(alteration)) is not None:
                errors[name] = error
            else:
                accepted[name] = alteration
        records: list[ApiMessageAndVersion] = []
        for alteration in accepted.values():
            if isinstance(alteration, ScramCredentialDeletion):
                record: MetadataRecord = RemoveUserScramCredentialRecord(
                    name=alteration.name, mechanism=alteration.mechanism
                )
            else:
                record = _credential_record(alteration)
            records.append(ApiMessageAndVersion(record, 0))
        results = [UserScramResult(name, ErrorCode.none) for name in accepted]
        return ControllerResult(records, [*results, *errors.values()])

    def _validate(
        self, alteration: ScramCredentialDeletion | ScramCredentialUpsertion
    ) -> UserScramResult | None:
        if isinstance(alteration, ScramCredentialDeletion):
            return self._validate_deletion(alteration)
        return _validate_upsertion(alteration)

    def _validate_deletion(self, deletion: ScramCredentialDeletion) -> UserScramResult | None:
        error = _validate_name_and_mechanism(deletion.name, deletion.mechanism)
        if error is None and (deletion.name, deletion.mechanism) not in self._credentials:
            return UserScramResult(
                deletion.name,
                ErrorCode.resource_not_found,
                "Attempt to delete a user credential that does not exist",
            )
        return error

    def replay(self, record: UserScramCredentialRecord) -> None:
        key = (record.name, record.mechanism)
        created = key not in self._credentials
        self._credentials[key] = ScramCredentialData(
            record.salt, record.stored_key, record.server_key, record.iterations
        )
        _log.info(
            "Replayed UserScramCredentialRecord %s entry for %s with mechanism %d.",
            "creating new" if created else "modifying existing",
            record.name,
            record.mechanism,
        )

    def replay_remove(self, record: RemoveUserScramCredentialRecord) -> None:
        if self._credentials.pop((record.name, record.mechanism), None) is None:
            raise RuntimeError(
                f"Unable to find credential to delete: {record.name} {record.mechanism}"
            )

    def records(self) -> Iterator[ApiMessageAndVersion]:
        for (user, mechanism), credential in self._credentials.items():
            yield ApiMessageAndVersion(credential.to_record(user, mechanism), 0)


def _validate_name_and_mechanism(name: str, mechanism: int) -> UserScramResult | None:
    if not name:
        return UserScramResult(
            name, ErrorCode.unacceptable_credential, "Username must not be empty"
        )
    if ScramMechanism.from_type(mechanism) is None:
        return UserScramResult(
            name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
        )
    return None


def _validate_upsertion(upsertion: ScramCredentialUpsertion) -> UserScramResult | None:
    error = _validate_name_and_mechanism(upsertion.name, upsertion.mechanism)
    if error is not None:
        return error
    mechanism = ScramMechanism.from_type(upsertion.mechanism)
    assert mechanism is not None
    if upsertion.iterations < mechanism.min_iterations:
        return UserScramResult(
            upsertion.name, ErrorCode.unacceptable_credential, "Too few iterations"
        )
    if upsertion.iterations > MAX_ITERATIONS:
        return UserScramResult(
            upsertion.name, ErrorCode.unacceptable_credential, "Too many iterations"
        )
    return None


def _credential_record(upsertion: ScramCredentialUpsertion) -> UserScramCredentialRecord:
    """Kafka's ``finishUpsertion``: StoredKey and ServerKey from the salted password."""
    mechanism = ScramMechanism.from_type(upsertion.mechanism)
    assert mechanism is not None
    credential = mechanism.credential(
        upsertion.salt, upsertion.salted_password, upsertion.iterations
    )
    return credential.to_record(upsertion.name, upsertion.mechanism)
