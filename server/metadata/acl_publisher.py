"""Kafka's AclPublisher: each metadata image whose ACLs changed hands them to the node's
authorizer, so an ACL created through any broker applies on every broker as soon as
its metadata log has the record (within a metadata fetch, milliseconds to seconds).

Until the broker has caught up with the log at start-up it does not serve clients at
all (it is fenced), which stands in for Kafka's completeInitialLoad.
"""

from __future__ import annotations

from tiercel.server.authorizer.authorizer import Authorizer
from tiercel.server.metadata.image.metadata_delta import MetadataDelta
from tiercel.server.metadata.image.metadata_image import MetadataImage

__all__ = ["AclPublisher"]


class AclPublisher:
    """Event-loop only; the loader calls it one image at a time."""

    name = "AclPublisher"

    def __init__(self, authorizer: Authorizer) -> None:
        self._authorizer = authorizer

    async def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if delta.acls_delta is not None:
            self._authorizer.update_acls(image.acls.acls)
