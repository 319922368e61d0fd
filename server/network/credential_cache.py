"""CredentialCache: the SCRAM credentials a broker checks logins against (Kafka's
`CredentialCache` with the `CredentialProvider` the `ScramPublisher` feeds).

The broker's metadata publisher hands it each new ScramImage (the credentials of the
KRaft metadata log), so a user created or deleted with AlterUserScramCredentials logs in,
or no longer can, on every broker as soon as that broker has applied the record. The image
is immutable, so a login already past its first message keeps the credential it read.
Event-loop only.
"""

from __future__ import annotations

from tiercel.protocol.sasl.scram_credential import ScramCredentialData
from tiercel.protocol.sasl.scram_formatter import ScramMechanism
from tiercel.server.metadata.image.scram import ScramImage

__all__ = ["CredentialCache"]


class CredentialCache:
    def __init__(self) -> None:
        self._scram = ScramImage.EMPTY

    def update(self, image: ScramImage) -> None:
        """The credentials of the newest metadata image."""
        self._scram = image

    @property
    def scram_image(self) -> ScramImage:
        return self._scram

    def scram_credential(self, mechanism: ScramMechanism, user: str) -> ScramCredentialData | None:
        return self._scram.mechanisms.get(mechanism.type, {}).get(user)
