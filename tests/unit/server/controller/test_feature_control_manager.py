"""FeatureControlManager: metadata.version and other finalized features through
UpdateFeatures, with Kafka's refusals (INVALID_UPDATE_VERSION), and their replay."""

from __future__ import annotations

import pytest
from control_manager_support import ManagersContext

from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord
from tiercel.protocol.metadata.metadata_version import FEATURE_NAME, MetadataVersion
from tiercel.server.controller.controller_exceptions import InvalidUpdateVersionError
from tiercel.server.controller.feature_control_manager import (
    UpgradeType,
    default_feature_map,
)
from tiercel.server.metadata.image.broker_registration import VersionRange

UPGRADE = {FEATURE_NAME: UpgradeType.UPGRADE}


def test_bootstrap_record_sets_metadata_version() -> None:
    ctx = ManagersContext()
    assert ctx.state.feature.metadata_version == MetadataVersion.IBP_4_0_IV3
    assert ctx.state.feature.finalized_features(5).levels == {FEATURE_NAME: 25}


def test_downgrade_across_a_metadata_change_is_refused() -> None:
    ctx = ManagersContext()
    with pytest.raises(InvalidUpdateVersionError) as e:
        ctx.state.feature.update_features(
            {FEATURE_NAME: 22}, {FEATURE_NAME: UpgradeType.SAFE_DOWNGRADE}, False
        )
    assert e.value.error_code == ErrorCode.invalid_update_version
    assert "might delete metadata information" in e.value.message
    with pytest.raises(InvalidUpdateVersionError, match="Unsafe metadata downgrade"):
        ctx.state.feature.update_features(
            {FEATURE_NAME: 22}, {FEATURE_NAME: UpgradeType.UNSAFE_DOWNGRADE}, False
        )


def test_safe_downgrade_without_metadata_change_writes_the_level() -> None:
    ctx = ManagersContext()
    result = ctx.state.feature.update_features(
        {FEATURE_NAME: 24}, {FEATURE_NAME: UpgradeType.SAFE_DOWNGRADE}, False
    )
    assert [r.message for r in result.records] == [
        FeatureLevelRecord(name=FEATURE_NAME, feature_level=24)
    ]
    assert ctx.state.feature.metadata_version == MetadataVersion.IBP_4_0_IV3  # not yet replayed
    ctx.run(result)
    assert ctx.state.feature.metadata_version == MetadataVersion.IBP_4_0_IV2


def test_downgrade_needs_a_downgrade_type_and_upgrade_an_upgrade_type() -> None:
    ctx = ManagersContext()
    with pytest.raises(InvalidUpdateVersionError, match="without setting the upgrade type"):
        ctx.state.feature.update_features({FEATURE_NAME: 24}, UPGRADE, False)
    ctx.run(
        ctx.state.feature.update_features(
            {FEATURE_NAME: 24}, {FEATURE_NAME: UpgradeType.SAFE_DOWNGRADE}, False
        )
    )
    with pytest.raises(InvalidUpdateVersionError, match="Can't downgrade to a newer version"):
        ctx.state.feature.update_features(
            {FEATURE_NAME: 25}, {FEATURE_NAME: UpgradeType.SAFE_DOWNGRADE}, False
        )
    with pytest.raises(InvalidUpdateVersionError, match="upgrade type"):
        ctx.state.feature.update_features(
            {FEATURE_NAME: 25}, {FEATURE_NAME: UpgradeType.UNKNOWN}, False
        )


def test_levels_outside_what_the_controller_or_a_broker_supports_are_refused() -> None:
    ctx = ManagersContext()
    with pytest.raises(
        InvalidUpdateVersionError, match="Local controller only supports versions 7-25"
    ):
        ctx.state.feature.update_features({FEATURE_NAME: 26}, UPGRADE, False)
    with pytest.raises(
        InvalidUpdateVersionError, match="Local controller only supports versions 0-1"
    ):
        ctx.state.feature.update_features({"group.version": 2}, {}, False)
    with pytest.raises(InvalidUpdateVersionError, match="does not support this feature"):
        ctx.state.feature.update_features({"transaction.version": 1}, {}, False)
    with pytest.raises(InvalidUpdateVersionError, match="cannot be less than 0"):
        ctx.state.feature.update_features({FEATURE_NAME: -1}, UPGRADE, False)


def test_the_controller_supports_what_tiercel_implements() -> None:
    # Kafka's QuorumFeatures.defaultFeatureMap: metadata.version's whole range and every
    # feature with a level above 0; transaction.version and kraft.version have only 0.
    assert default_feature_map() == {
        FEATURE_NAME: VersionRange(7, 25),
        "group.version": VersionRange(0, 1),
    }
    assert ManagersContext().state.config.supported_features == default_feature_map()


def test_a_feature_only_disabled_in_tiercel_can_be_set_to_zero() -> None:
    ctx = ManagersContext()
    result = ctx.state.feature.update_features({"transaction.version": 0}, {}, False)
    assert [r.message for r in result.records] == [
        FeatureLevelRecord(name="transaction.version", feature_level=0)
    ]


def test_a_registered_broker_limits_the_levels() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1)  # supports metadata.version only
    with pytest.raises(InvalidUpdateVersionError, match="Broker 1 does not support this feature"):
        ctx.state.feature.update_features({"group.version": 1}, {}, False)


def test_other_features_are_finalized_and_removed_at_level_zero() -> None:
    ctx = ManagersContext()
    ctx.run(ctx.state.feature.update_features({"group.version": 1}, {}, False))
    assert ctx.state.feature.finalized_features(0).levels["group.version"] == 1
    assert [r.message for r in ctx.state.feature.records()] == [
        FeatureLevelRecord(name=FEATURE_NAME, feature_level=25),
        FeatureLevelRecord(name="group.version", feature_level=1),
    ]
    ctx.run(
        ctx.state.feature.update_features(
            {"group.version": 0}, {"group.version": UpgradeType.SAFE_DOWNGRADE}, False
        )
    )
    assert "group.version" not in ctx.state.feature.finalized_features(0).levels


def test_validate_only_writes_nothing() -> None:
    ctx = ManagersContext()
    assert (
        ctx.state.feature.update_features(
            {FEATURE_NAME: 24}, {FEATURE_NAME: UpgradeType.SAFE_DOWNGRADE}, True
        ).records
        == []
    )
