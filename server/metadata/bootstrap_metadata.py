"""The records a new KRaft cluster's metadata log starts with (Kafka's
``BootstrapMetadata``): the FeatureLevelRecord of ``metadata.version`` first, then the
other features' levels, then whatever formatting added (SCRAM users, once security
lands). The first active controller writes them on an empty log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.metadata_version import FEATURE_NAME, MetadataVersion
from tiercel.server.metadata.supported_features import KRAFT_VERSION

__all__ = ["BootstrapMetadata", "BootstrapMetadataError"]


class BootstrapMetadataError(Exception):
    """Bootstrap records without a usable metadata.version."""


@dataclass(frozen=True)
class BootstrapMetadata:
    """Invariant: ``metadata_version`` is that of the last metadata.version
    FeatureLevelRecord in ``records``. ``source`` names where they came from, for
    messages."""

    records: Sequence[ApiMessageAndVersion]
    metadata_version: MetadataVersion
    source: str

    @classmethod
    def from_versions(
        cls, metadata_version: MetadataVersion, feature_levels: Mapping[str, int], source: str
    ) -> BootstrapMetadata:
        """metadata.version's record, then each other feature above level 0 in name
        order; kraft.version has no FeatureLevelRecord (it lives in the KRaft control
        records), as Kafka's BootstrapMetadata.fromVersions."""
        records = [_feature_level(FEATURE_NAME, metadata_version.feature_level)]
        for name in sorted(feature_levels):
            level = feature_levels[name]
            if name not in (FEATURE_NAME, KRAFT_VERSION) and level > 0:
                records.append(_feature_level(name, level))
        return cls(tuple(records), metadata_version, source)

    @classmethod
    def from_records(
        cls, records: Sequence[ApiMessageAndVersion], source: str
    ) -> BootstrapMetadata:
        """The metadata of ``records``; BootstrapMetadataError without a metadata.version
        this node knows (every level it knows is one a bootstrap may start at: Kafka's
        MINIMUM_BOOTSTRAP_VERSION is its minimum KRaft version)."""
        version = None
        for record in records:
            message = record.message
            if isinstance(message, FeatureLevelRecord) and message.name == FEATURE_NAME:
                try:
                    version = MetadataVersion.from_feature_level(message.feature_level)
                except ValueError as e:
                    raise BootstrapMetadataError(f"{e} Can't load metadata from {source}") from None
        if version is None:
            raise BootstrapMetadataError(
                f"No FeatureLevelRecord for {FEATURE_NAME} was found in the bootstrap "
                f"metadata from {source}"
            )
        return cls(tuple(records), version, source)

    def feature_level(self, name: str) -> int:
        """The level the records give feature ``name`` (0 when they give none)."""
        level = 0
        for record in self.records:
            message = record.message
            if isinstance(message, FeatureLevelRecord) and message.name == name:
                level = message.feature_level
        return level


def _feature_level(name: str, level: int) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(FeatureLevelRecord(name=name, feature_level=level), 0)
