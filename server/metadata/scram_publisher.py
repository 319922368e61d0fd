"""ScramPublisher: the SCRAM credentials of each new metadata image go to the broker's
CredentialCache (Kafka's ``ScramPublisher`` feeding its ``CredentialProvider``), so a user
created, changed or deleted with AlterUserScramCredentials, or by ``storage format
--add-scram``, can or can no longer log in once this broker has applied the record.
Event-loop only."""

from __future__ import annotations

from tiercel.server.metadata.image.metadata_delta import MetadataDelta
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.server.network.credential_cache import CredentialCache

__all__ = ["ScramPublisher"]


class ScramPublisher:
    name = "ScramPublisher"

    def __init__(self, credential_cache: CredentialCache) -> None:
        self._credential_cache = credential_cache

    async def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if delta.scram_delta is not None:
            self._credential_cache.update(image.scram)
