"""metadata.version as Kafka 4.0's MetadataVersion: its levels, its names, and the record
versions each level writes."""

from __future__ import annotations

import pytest

from tiercel.protocol.metadata.metadata_version import (
    LATEST_PRODUCTION,
    MINIMUM_VERSION,
    MetadataVersion,
)

V = MetadataVersion


def test_kafka_4_0_knows_levels_7_to_25_and_starts_clusters_at_4_0_iv3() -> None:
    assert [v.feature_level for v in V] == list(range(7, 26))
    assert (MINIMUM_VERSION, LATEST_PRODUCTION) == (V.IBP_3_3_IV3, V.IBP_4_0_IV3)
    assert str(LATEST_PRODUCTION) == "4.0-IV3"
    assert (LATEST_PRODUCTION.release, LATEST_PRODUCTION.version) == ("4.0", "4.0-IV3")


def test_versions_compare_by_level() -> None:
    assert V.IBP_3_7_IV2 > V.IBP_3_7_IV1
    assert V.IBP_4_0_IV1 >= V.IBP_4_0_IV1
    assert sorted([V.IBP_4_0_IV0, V.IBP_3_3_IV3, V.IBP_3_9_IV0]) == [
        V.IBP_3_3_IV3,
        V.IBP_3_9_IV0,
        V.IBP_4_0_IV0,
    ]


def test_the_levels_that_changed_records() -> None:
    changed = [str(v) for v in V if v.did_metadata_change]
    assert changed == [
        "3.3-IV3",
        "3.4-IV0",
        "3.5-IV2",
        "3.6-IV1",
        "3.6-IV2",
        "3.7-IV0",
        "3.7-IV2",
        "4.0-IV1",
    ]


def test_from_feature_level() -> None:
    assert V.from_feature_level(23) is V.IBP_4_0_IV1
    for level in (0, 6, 26):
        with pytest.raises(ValueError, match=f"No MetadataVersion with feature level {level}"):
            V.from_feature_level(level)


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("4.0", V.IBP_4_0_IV3),
        ("4.0-IV1", V.IBP_4_0_IV1),
        ("3.7", V.IBP_3_7_IV4),
        ("3.8.0", V.IBP_3_8_IV0),
        ("3.9.1", V.IBP_3_9_IV0),
        ("3.3", V.IBP_3_3_IV3),
    ],
)
def test_from_version_string(text: str, version: MetadataVersion) -> None:
    assert V.from_version_string(text) is version


@pytest.mark.parametrize("text", ["3.2", "3.3-IV2", "4.1", "4.0-IV4", "", "four"])
def test_from_version_string_refuses_what_kafka_4_0_does_not_know(text: str) -> None:
    with pytest.raises(ValueError, match=r"The minimum version is 3\.3-IV3 and the maximum"):
        V.from_version_string(text)


@pytest.mark.parametrize(
    ("version", "register_broker", "partition"),
    [
        (V.IBP_3_3_IV3, 1, 0),
        (V.IBP_3_4_IV0, 2, 0),
        (V.IBP_3_7_IV1, 2, 0),
        (V.IBP_3_7_IV2, 3, 1),  # JBOD: LogDirs, Directories
        (V.IBP_4_0_IV0, 3, 1),
        (V.IBP_4_0_IV1, 3, 2),  # ELR
        (LATEST_PRODUCTION, 3, 2),
    ],
)
def test_record_versions_follow_the_level(
    version: MetadataVersion, register_broker: int, partition: int
) -> None:
    assert version.register_broker_record_version() == register_broker
    assert version.partition_record_version() == partition
    assert version.partition_change_record_version() == partition


def test_controller_registrations_need_3_7_iv0() -> None:
    assert V.IBP_3_7_IV0.register_controller_record_version() == 0
    with pytest.raises(ValueError, match=r"not supported in MetadataVersion 3\.6-IV2"):
        V.IBP_3_6_IV2.register_controller_record_version()


def test_feature_gates() -> None:
    assert not V.IBP_3_5_IV1.is_scram_supported()
    assert V.IBP_3_5_IV2.is_scram_supported()
    assert not V.IBP_3_6_IV1.is_delegation_token_supported()
    assert V.IBP_3_6_IV2.is_delegation_token_supported()
    assert not V.IBP_3_3_IV3.is_migration_supported()
    assert V.IBP_3_4_IV0.is_migration_supported()
    assert not V.IBP_4_0_IV0.is_elr_supported()
    assert V.IBP_4_0_IV1.is_elr_supported()
