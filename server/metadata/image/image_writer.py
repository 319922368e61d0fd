"""Writing an image as metadata records, as a snapshot holds it (Kafka's ImageWriter,
ImageWriterOptions and RecordListWriter).

An image writes itself in a fixed order (`MetadataImage.write`): the metadata.version
FeatureLevelRecord first, because it says how every later record was written; then the
other features, brokers and controllers, each topic with its partitions, configs,
quotas, the producer id block, ACLs, SCRAM credentials and delegation tokens. The
records are at the versions `ImageWriterOptions.metadata_version` writes. What that
version has no record for (controller registrations before 3.7-IV0, replica
directories before 3.7-IV2...) is a loss, handed to the options' loss handler, which by
default raises `UnwritableMetadataError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.metadata_version import LATEST_PRODUCTION, MetadataVersion
from tiercel.server.metadata.image.errors import UnwritableMetadataError

__all__ = ["ImageWriter", "ImageWriterOptions", "RecordListWriter"]


class ImageWriter(Protocol):
    """Where an image's records go (a snapshot file, a list)."""

    def write(self, record: ApiMessageAndVersion) -> None: ...


class RecordListWriter:
    """Collects the records written, in order. Not thread-safe."""

    def __init__(self) -> None:
        self.records: list[ApiMessageAndVersion] = []

    def write(self, record: ApiMessageAndVersion) -> None:
        self.records.append(record)


def _raise_loss(error: UnwritableMetadataError) -> None:
    raise error


@dataclass(frozen=True, slots=True)
class ImageWriterOptions:
    """The metadata.version to write records at, and what to do with what it cannot
    hold (by default, raise)."""

    metadata_version: MetadataVersion = LATEST_PRODUCTION
    loss_handler: Callable[[UnwritableMetadataError], None] = field(default=_raise_loss)

    def handle_loss(self, loss: str) -> None:
        self.loss_handler(
            UnwritableMetadataError(
                f"Metadata has been lost because the following could not be represented "
                f"in metadata.version {self.metadata_version}: {loss}"
            )
        )
