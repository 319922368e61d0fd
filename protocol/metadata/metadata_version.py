"""``metadata.version``: the feature that says which metadata records, and which of their
versions, a cluster writes (Kafka's MetadataVersion, KIP-778).

Its value is the feature level of a FeatureLevelRecord named ``metadata.version``, the
first record of every log and snapshot. Kafka 4.0 knows levels 7 (3.3-IV3, its minimum)
to 25 (4.0-IV3, its latest production version, what a new cluster starts with):

    level  version   metadata change            level  version   metadata change
      7    3.3-IV3   yes (KIP-841)                17   3.7-IV2   yes (JBOD, KIP-858)
      8    3.4-IV0   yes (KIP-866)                18   3.7-IV3
      9    3.5-IV0                                19   3.7-IV4
     10    3.5-IV1                                20   3.8-IV0
     11    3.5-IV2   yes (SCRAM)                  21   3.9-IV0
     12    3.6-IV0                                22   4.0-IV0
     13    3.6-IV1   yes (transactions)           23   4.0-IV1   yes (ELR, KIP-966)
     14    3.6-IV2   yes (delegation tokens)      24   4.0-IV2
     15    3.7-IV0   yes (KIP-919)                25   4.0-IV3
     16    3.7-IV1

The record versions a level writes are below (`partition_record_version`...): Kafka
4.0 writes PartitionRecord and PartitionChangeRecord v2, RegisterBrokerRecord v3 and
RegisterControllerRecord v0 at 4.0-IV3, and every other record at version 0.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["FEATURE_NAME", "LATEST_PRODUCTION", "MINIMUM_VERSION", "MetadataVersion"]

FEATURE_NAME: Final = "metadata.version"

# Feature level: (release, internal version, whether records changed at this level).
_VERSIONS: Final[dict[int, tuple[str, str, bool]]] = {
    7: ("3.3", "IV3", True),
    8: ("3.4", "IV0", True),
    9: ("3.5", "IV0", False),
    10: ("3.5", "IV1", False),
    11: ("3.5", "IV2", True),
    12: ("3.6", "IV0", False),
    13: ("3.6", "IV1", True),
    14: ("3.6", "IV2", True),
    15: ("3.7", "IV0", True),
    16: ("3.7", "IV1", False),
    17: ("3.7", "IV2", True),
    18: ("3.7", "IV3", False),
    19: ("3.7", "IV4", False),
    20: ("3.8", "IV0", False),
    21: ("3.9", "IV0", False),
    22: ("4.0", "IV0", False),
    23: ("4.0", "IV1", True),
    24: ("4.0", "IV2", False),
    25: ("4.0", "IV3", False),
}


class MetadataVersion(enum.IntEnum):
    """A metadata.version, valued by its feature level, so that versions compare as
    Kafka's ``isAtLeast`` and ``isLessThan`` compare them."""

    IBP_3_3_IV3 = 7
    IBP_3_4_IV0 = 8
    IBP_3_5_IV0 = 9
    IBP_3_5_IV1 = 10
    IBP_3_5_IV2 = 11
    IBP_3_6_IV0 = 12
    IBP_3_6_IV1 = 13
    IBP_3_6_IV2 = 14
    IBP_3_7_IV0 = 15
    IBP_3_7_IV1 = 16
    IBP_3_7_IV2 = 17
    IBP_3_7_IV3 = 18
    IBP_3_7_IV4 = 19
    IBP_3_8_IV0 = 20
    IBP_3_9_IV0 = 21
    IBP_4_0_IV0 = 22
    IBP_4_0_IV1 = 23
    IBP_4_0_IV2 = 24
    IBP_4_0_IV3 = 25

    @property
    def feature_level(self) -> int:
        return int(self)

    @property
    def release(self) -> str:
        """The Kafka release, "4.0" (MetadataVersion.shortVersion)."""
        return _VERSIONS[self][0]

    @property
    def version(self) -> str:
        """The release and internal version, "4.0-IV3" (MetadataVersion.version)."""
        release, internal, _ = _VERSIONS[self]
        return f"{release}-{internal}"

    @property
    def did_metadata_change(self) -> bool:
        """Whether records changed at this level: a downgrade across it loses data."""
        return _VERSIONS[self][2]

    def __str__(self) -> str:
        return self.version

    @classmethod
    def from_feature_level(cls, level: int) -> MetadataVersion:
        try:
            return cls(level)
        except ValueError:
            raise ValueError(
                f"No MetadataVersion with feature level {level}. Valid feature levels are "
                f"from {MINIMUM_VERSION.feature_level} to {LATEST_PRODUCTION.feature_level}."
            ) from None

    @classmethod
    def from_version_string(cls, text: str) -> MetadataVersion:
        """A version ("4.0-IV1"), or a release ("3.8"; "3.8.0", as anything past the
        second segment is ignored) as its latest internal version (fromVersionString)."""
        key = ".".join(text.split(".")[:2])
        for version in sorted(cls, reverse=True):
            if key in (version.version, version.release):
                return version
        raise ValueError(
            f"Version {text} is not a valid version. The minimum version is "
            f"{MINIMUM_VERSION} and the maximum version is {LATEST_PRODUCTION}"
        )

    def is_migration_supported(self) -> bool:
        return self >= MetadataVersion.IBP_3_4_IV0

    def is_scram_supported(self) -> bool:
        return self >= MetadataVersion.IBP_3_5_IV2

    def is_delegation_token_supported(self) -> bool:
        return self >= MetadataVersion.IBP_3_6_IV2

    def is_controller_registration_supported(self) -> bool:
        return self >= MetadataVersion.IBP_3_7_IV0

    def is_directory_assignment_supported(self) -> bool:
        return self >= MetadataVersion.IBP_3_7_IV2

    def is_elr_supported(self) -> bool:
        return self >= MetadataVersion.IBP_4_0_IV1

    def register_broker_record_version(self) -> int:
        if self.is_directory_assignment_supported():
            return 3  # LogDirs
        if self.is_migration_supported():
            return 2  # IsMigratingZkBroker
        return 1

    def register_controller_record_version(self) -> int:
        if not self.is_controller_registration_supported():
            raise ValueError(f"Controller registration is not supported in MetadataVersion {self}")
        return 0

    def partition_record_version(self) -> int:
        if self.is_elr_supported():
            return 2  # EligibleLeaderReplicas, LastKnownElr
        if self.is_directory_assignment_supported():
            return 1  # Directories
        return 0

    def partition_change_record_version(self) -> int:
        return self.partition_record_version()


MINIMUM_VERSION: Final = MetadataVersion.IBP_3_3_IV3
LATEST_PRODUCTION: Final = MetadataVersion.IBP_4_0_IV3
