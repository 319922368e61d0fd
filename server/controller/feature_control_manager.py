"""The cluster's finalized features, ``metadata.version`` first (Kafka's
``FeatureControlManager``, KIP-584 and KIP-778).

UpdateFeatures is all or nothing, as Kafka 4.0's ``updateFeatures``: the first update
that cannot be applied fails the whole request with INVALID_UPDATE_VERSION and no record
is written. A level must be supported by this controller and by every registered broker
(Kafka's ``reasonNotSupported``); lowering a level needs a downgrade type, and lowering
``metadata.version`` across a level whose records changed is refused (unsafe downgrades
are not supported, as in Kafka 4.0). A FeatureLevelRecord of level 0 removes a feature.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.metadata_version import (
    FEATURE_NAME,
    LATEST_PRODUCTION,
    MINIMUM_VERSION,
    MetadataVersion,
)
from tiercel.server.controller.controller_exceptions import InvalidUpdateVersionError
from tiercel.server.controller.controller_result import ControllerResult
from tiercel.server.metadata.image.broker_registration import VersionRange
from tiercel.server.metadata.supported_features import SUPPORTED_FEATURES

__all__ = [
    "FeatureControlManager",
    "FinalizedControllerFeatures",
    "UpgradeType",
    "default_feature_map",
]


class UpgradeType(enum.IntEnum):
    """UpdateFeatures v1+'s UpgradeType (Kafka's ``FeatureUpdate.UpgradeType``)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


def default_feature_map() -> dict[str, VersionRange]:
    """What this controller can finalize (Kafka's QuorumFeatures.defaultFeatureMap):
    metadata.version from the minimum to the latest production level, and every feature
    of ``supported_features`` that has a level above 0. A feature whose only level is 0
    (off) is left out, as Kafka leaves it out, so the controller reports it unsupported
    and still lets it be disabled."""
    features = {
        FEATURE_NAME: VersionRange(MINIMUM_VERSION.feature_level, LATEST_PRODUCTION.feature_level)
    }
    for feature in SUPPORTED_FEATURES:
        if feature.max_level > 0:
            features[feature.name] = VersionRange(feature.min_level, feature.max_level)
    return features


@dataclass(frozen=True, slots=True)
class FinalizedControllerFeatures:
    """The finalized levels, metadata.version included (Kafka's
    ``FinalizedControllerFeatures``), as DescribeFeatures and ApiVersions report them."""

    levels: Mapping[str, int]
    epoch: int


BrokersSupported = Callable[[], Iterator[tuple[int, Mapping[str, VersionRange]]]]


class FeatureControlManager:
    """Event-loop only. ``metadata_version`` is None until the first FeatureLevelRecord
    for metadata.version is replayed (an empty log: the controller writes its bootstrap
    records first)."""

    def __init__(
        self,
        brokers_supported: BrokersSupported,
        supported_features: Mapping[str, VersionRange],
    ) -> None:
        self._brokers_supported = brokers_supported
        self._supported = dict(supported_features)
        self._metadata_version: MetadataVersion | None = None
        self._finalized: dict[str, int] = {}

    @property
    def metadata_version(self) -> MetadataVersion:
        """The current metadata.version; the latest production one before bootstrap
        (the records a controller writes before it replayed any are bootstrap records)."""
        return self._metadata_version or LATEST_PRODUCTION

    @property
    def has_metadata_version(self) -> bool:
        return self._metadata_version is not None

    def finalized_features(self, epoch: int) -> FinalizedControllerFeatures:
        levels = dict(self._finalized)
        if self._metadata_version is not None:
            levels[FEATURE_NAME] = self._metadata_version.feature_level
        return FinalizedControllerFeatures(levels, epoch)

    def update_features(
        self,
        updates: Mapping[str, int],
        upgrade_types: Mapping[str, UpgradeType],
        validate_only: bool,
    ) -> ControllerResult[None]:
        """Kafka's ``updateFeatures``; InvalidUpdateVersionError names the first failure."""
        records: list[ApiMessageAndVersion] = []
        for name, level in updates.items():
            self._update_feature(name, level, upgrade_types.get(name, UpgradeType.UPGRADE))
            records.append(
                ApiMessageAndVersion(FeatureLevelRecord(name=name, feature_level=level), 0)
            )
        return ControllerResult([] if validate_only else records, None)

    def _update_feature(self, name: str, level: int, upgrade_type: UpgradeType) -> None:
        if upgrade_type == UpgradeType.UNKNOWN:
            raise _invalid(name, level, "The controller does not support the given upgrade type.")
        if name == FEATURE_NAME:
            current = self.metadata_version.feature_level
        else:
            current = self._finalized.get(name, 0)
        if level < 0:
            raise _invalid(name, level, "A feature version cannot be less than 0.")
        reason = self._reason_not_supported(name, level)
        if reason is not None:
            raise _invalid(name, level, reason)
        if level < current and upgrade_type == UpgradeType.UPGRADE:
            raise _invalid(
                name,
                level,
                "Can't downgrade the version of this feature without setting the upgrade "
                "type to either safe or unsafe downgrade.",
            )
        if level > current and upgrade_type != UpgradeType.UPGRADE:
            raise _invalid(name, level, "Can't downgrade to a newer version.")
        if name == FEATURE_NAME:
            self._check_metadata_version(level, upgrade_type == UpgradeType.UNSAFE_DOWNGRADE)

    def _reason_not_supported(self, name: str, level: int) -> str | None:
        # Kafka's QuorumFeatures.reasonNotSupported: this controller, then every broker.
        ranges = [("Local controller", self._supported.get(name))]
        ranges += [(f"Broker {b}", s.get(name)) for b, s in self._brokers_supported()]
        for who, supported in ranges:
            if level == 0 and supported is None:
                continue  # Disabling a feature nobody supports is fine (level 0).
            if supported is None:
                return f"{who} does not support this feature."
            if not supported.contains(level):
                return (
                    f"{who} only supports versions {supported.min}-{supported.max}"
                    if level
                    else f"{who} cannot disable this feature"
                )
        return None

    def _check_metadata_version(self, level: int, unsafe: bool) -> None:
        # Kafka's updateMetadataVersion.
        try:
            new = MetadataVersion.from_feature_level(level)
        except ValueError:
            raise _invalid_metadata_version(level, "Unknown metadata.version.") from None
        current = self.metadata_version
        if new < current:
            changed = any(
                MetadataVersion(v).did_metadata_change for v in range(new + 1, current + 1)
            )
            if changed and unsafe:
                raise _invalid_metadata_version(
                    level, "Unsafe metadata downgrade is not supported in this version."
                )
            if changed:
                raise _invalid_metadata_version(
                    level,
                    "Refusing to perform the requested downgrade because it might delete "
                    "metadata information.",
                )

    def replay(self, record: FeatureLevelRecord) -> None:
        if record.name == FEATURE_NAME:
            self._metadata_version = MetadataVersion.from_feature_level(record.feature_level)
        elif record.feature_level == 0:
            self._finalized.pop(record.name, None)
        else:
            self._finalized[record.name] = record.feature_level

    def records(self) -> Iterator[ApiMessageAndVersion]:
        """The state as records, metadata.version first as every snapshot starts."""
        if self._metadata_version is not None:
            yield _level(FEATURE_NAME, self._metadata_version.feature_level)
        for name in sorted(self._finalized):
            yield _level(name, self._finalized[name])


def _level(name: str, level: int) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(FeatureLevelRecord(name=name, feature_level=level), 0)


def _invalid(name: str, level: int, reason: str) -> InvalidUpdateVersionError:
    # Kafka's FeatureControlManager.invalidUpdateVersion.
    return InvalidUpdateVersionError(f"Invalid update version {level} for feature {name}. {reason}")


def _invalid_metadata_version(level: int, reason: str) -> InvalidUpdateVersionError:
    return InvalidUpdateVersionError(f"Invalid metadata.version {level}. {reason}")
