"""The finalized feature levels of the metadata image, ``metadata.version`` first, and
changes to them (Kafka's FeaturesImage and FeaturesDelta; KIP-584, KIP-778)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.metadata_version import FEATURE_NAME, MetadataVersion
from tiercel.server.metadata.image.errors import MetadataReplayError
from tiercel.server.metadata.image.image_writer import ImageWriter, ImageWriterOptions
from tiercel.server.metadata.image.map_changes import apply_changes

__all__ = ["FeaturesDelta", "FeaturesImage"]


@dataclass(frozen=True, slots=True)
class FeaturesImage:
    """The cluster's metadata.version (None until a log or snapshot has set it) and the
    finalized level of every other enabled feature (``kraft.version``,
    ``transaction.version``...). A value; any thread."""

    EMPTY: ClassVar[FeaturesImage]

    finalized_versions: Mapping[str, int]
    metadata_version: MetadataVersion | None

    def is_empty(self) -> bool:
        return not self.finalized_versions and self.metadata_version is None

    def metadata_version_or_throw(self) -> MetadataVersion:
        if self.metadata_version is None:
            raise MetadataReplayError("No metadata.version is set in the image")
        return self.metadata_version

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        """The metadata.version the records are written at, first, then the other
        features; FeatureLevelRecord stays at version 0 so that any reader reads it."""
        level = options.metadata_version.feature_level
        writer.write(
            ApiMessageAndVersion(FeatureLevelRecord(name=FEATURE_NAME, feature_level=level), 0)
        )
        for name, level in self.finalized_versions.items():
            writer.write(
                ApiMessageAndVersion(FeatureLevelRecord(name=name, feature_level=level), 0)
            )


FeaturesImage.EMPTY = FeaturesImage(MappingProxyType({}), None)


class FeaturesDelta:
    """Changes to the feature levels: a level of 0 disables a feature. Not
    thread-safe: one replayer builds a delta."""

    def __init__(self, image: FeaturesImage) -> None:
        self.image = image
        self.changes: dict[str, int | None] = {}
        self.metadata_version_change: MetadataVersion | None = None

    def replay(self, record: FeatureLevelRecord) -> None:
        if record.name == FEATURE_NAME:
            try:
                version = MetadataVersion.from_feature_level(record.feature_level)
            except ValueError as e:
                raise MetadataReplayError(str(e)) from None
            self.metadata_version_change = version
        else:
            self.changes[record.name] = record.feature_level or None

    def finish_snapshot(self) -> None:
        """After a snapshot's records: every feature the snapshot did not name is off."""
        for name in self.image.finalized_versions:
            self.changes.setdefault(name, None)

    def apply(self) -> FeaturesImage:
        version = self.metadata_version_change or self.image.metadata_version
        return FeaturesImage(apply_changes(self.image.finalized_versions, self.changes), version)
