"""The finalized features (KIP-584) a KRaft cluster of Tiercel nodes can run at, besides
``metadata.version`` (Kafka's server-common ``Features``).

Each level is listed with the metadata.version it needs to be the default, as Kafka's
FeatureVersion.bootstrapMetadataVersion; Tiercel lists only the levels it implements:
``transaction.version`` 2 (KIP-890 part 2) and ``kraft.version`` 1 (KIP-853 dynamic
quorums) are Kafka's but not yet Tiercel's, so a cluster cannot be formatted with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.metadata.metadata_version import MetadataVersion

__all__ = ["KRAFT_VERSION", "SUPPORTED_FEATURES", "SupportedFeature", "feature_named"]

KRAFT_VERSION: Final = "kraft.version"


@dataclass(frozen=True)
class SupportedFeature:
    """A feature and its levels, each with the metadata.version that makes it the
    default (level 0 needs none)."""

    name: str
    levels: Mapping[int, MetadataVersion]

    @property
    def min_level(self) -> int:
        """Kafka's Features.minimumProduction: the lowest level Tiercel implements."""
        return min(self.levels)

    @property
    def max_level(self) -> int:
        return max(self.levels)

    def default_level(self, metadata_version: MetadataVersion) -> int:
        """The highest level whose metadata.version is at most ``metadata_version``
        (Kafka's Features.defaultValue)."""
        return max(level for level, mv in self.levels.items() if mv <= metadata_version)

    def validate(self, level: int) -> None:
        """ValueError unless Tiercel implements ``level`` (Kafka's
        Features.fromFeatureLevel; its validateVersion's dependency on metadata.version
        3.3-IV0 always holds, as no older metadata.version can be formatted)."""
        if level not in self.levels:
            raise ValueError(f"No feature:{self.name} with feature level {level}")


_MINIMUM: Final = MetadataVersion.IBP_3_3_IV3

SUPPORTED_FEATURES: Final = (
    # Version 1 enables the consumer rebalance protocol, KIP-848 (Kafka's GroupVersion).
    SupportedFeature("group.version", {0: _MINIMUM, 1: MetadataVersion.IBP_4_0_IV0}),
    SupportedFeature(KRAFT_VERSION, {0: _MINIMUM}),
    SupportedFeature("transaction.version", {0: _MINIMUM}),
)


def feature_named(name: str) -> SupportedFeature:
    """The feature called ``name``; ValueError with Kafka's message if there is none."""
    for feature in SUPPORTED_FEATURES:
        if feature.name == name:
            return feature
    names = ", ".join(f.name for f in SUPPORTED_FEATURES)
    raise ValueError(f"Unsupported feature: {name}. Supported features are: {names}")
