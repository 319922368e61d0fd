"""The SCRAM credentials of the metadata image, per mechanism and user, and changes to
them (Kafka's ScramCredentialData, ScramImage and ScramDelta; KIP-554).

Mechanisms are Kafka's ScramMechanism types as the records carry them: 1 SCRAM-SHA-256,
2 SCRAM-SHA-512. A credential's repr hides its secrets, as Kafka's toString does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.security_records import (
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from tiercel.protocol.sasl.scram_credential import ScramCredentialData
from tiercel.server.metadata.image.image_writer import ImageWriter, ImageWriterOptions
from tiercel.server.metadata.image.map_changes import apply_changes

__all__ = ["ScramDelta", "ScramImage"]


@dataclass(frozen=True, slots=True)
class ScramImage:
    """Credentials by mechanism, then by user; a mechanism without users is absent. A
    value; any thread."""

    EMPTY: ClassVar[ScramImage]

    mechanisms: Mapping[int, Mapping[str, ScramCredentialData]]

    def is_empty(self) -> bool:
        return not self.mechanisms

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        """Before 3.5-IV2 there is no SCRAM record: credentials are a loss."""
        if not options.metadata_version.is_scram_supported():
            if self.mechanisms:
                names = sorted({name for users in self.mechanisms.values() for name in users})
                options.handle_loss(f"SCRAM credentials of {', '.join(names)}")
            return
        for mechanism, users in self.mechanisms.items():
            for user, credential in users.items():
                writer.write(ApiMessageAndVersion(credential.to_record(user, mechanism), 0))


ScramImage.EMPTY = ScramImage(MappingProxyType({}))


class ScramDelta:
    """Credentials set or removed (None), per mechanism and user. Not thread-safe: one
    replayer builds a delta."""

    def __init__(self, image: ScramImage) -> None:
        self.image = image
        self.changes: dict[int, dict[str, ScramCredentialData | None]] = {}

    def replay(self, record: UserScramCredentialRecord | RemoveUserScramCredentialRecord) -> None:
        users = self.changes.setdefault(record.mechanism, {})
        if isinstance(record, UserScramCredentialRecord):
            users[record.name] = ScramCredentialData(
                record.salt, record.stored_key, record.server_key, record.iterations
            )
        else:
            users[record.name] = None

    def finish_snapshot(self) -> None:
        for mechanism, users in self.image.mechanisms.items():
            changes = self.changes.setdefault(mechanism, {})
            for user in users:
                changes.setdefault(user, None)

    def apply(self) -> ScramImage:
        mechanisms = dict(self.image.mechanisms)
        for mechanism, changes in self.changes.items():
            users = apply_changes(mechanisms.get(mechanism, MappingProxyType({})), changes)
            if users:
                mechanisms[mechanism] = users
            else:
                mechanisms.pop(mechanism, None)
        return ScramImage(MappingProxyType(mechanisms))
