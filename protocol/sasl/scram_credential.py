"""ScramCredentialData: what is stored of a SCRAM user's password (Kafka's ScramCredential),
the value the metadata image, the broker's credential cache and the formatter share."""

from __future__ import annotations

from dataclasses import dataclass

from tiercel.protocol.metadata.security_records import UserScramCredentialRecord

__all__ = ["ScramCredentialData"]


@dataclass(frozen=True, slots=True)
class ScramCredentialData:
    """A stored SCRAM credential (RFC 5802): salt, stored key, server key, iterations."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return "ScramCredentialData(salt=[hidden], stored_key=[hidden], server_key=[hidden])"

    def to_record(self, user: str, mechanism: int) -> UserScramCredentialRecord:
        return UserScramCredentialRecord(
            name=user,
            mechanism=mechanism,
            salt=self.salt,
            stored_key=self.stored_key,
            server_key=self.server_key,
            iterations=self.iterations,
        )
