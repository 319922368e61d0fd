"""Kafka's LogConfig.validate rules for tiered topics (KIP-405, KIP-950), on the effective
configuration: broker defaults, then the topic's overrides as they will be."""

from __future__ import annotations

import pytest

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError
from tiercel.config.log_config_validator import validate_topic_configs

TIERING = BrokerConfig({"remote.log.storage.system.enable": "true"})
NOT_TIERING = BrokerConfig({})
TIERED = {"remote.storage.enable": "true"}


def test_plain_topics_are_checked_and_canonicalised_as_before() -> None:
    assert validate_topic_configs(NOT_TIERING, {"retention.ms": "+100"}) == {"retention.ms": "100"}
    with pytest.raises(ConfigError, match="Unknown topic config name"):
        validate_topic_configs(NOT_TIERING, {"no.such": "1"})
    with pytest.raises(ConfigError, match=r"min\.compaction\.lag\.ms"):
        validate_topic_configs(
            NOT_TIERING, {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}
        )


def test_tiering_needs_the_broker_to_tier() -> None:
    with pytest.raises(ConfigError, match=r"remote\.log\.storage\.system\.enable=false") as e:
        validate_topic_configs(NOT_TIERING, {"remote.storage.enable": "TRUE"})
    assert e.value.key == "remote.storage.enable"
    assert validate_topic_configs(TIERING, {"remote.storage.enable": "TRUE"}) == TIERED
    # Setting it false, or the other remote keys alone, needs no tiering broker.
    assert validate_topic_configs(NOT_TIERING, {"remote.storage.enable": "false"})
    assert validate_topic_configs(NOT_TIERING, {"local.retention.ms": "99999999999"})


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact"])
def test_a_compacted_topic_cannot_be_tiered(policy: str) -> None:
    with pytest.raises(ConfigError, match="not supported for compacted topics") as e:
        validate_topic_configs(TIERING, {**TIERED, "cleanup.policy": policy})
    assert e.value.key == "cleanup.policy"
    # Making a tiered topic compacted: the new map keeps remote.storage.enable.
    with pytest.raises(ConfigError, match="compacted"):
        validate_topic_configs(TIERING, {**TIERED, "cleanup.policy": policy}, TIERED)
    # The broker's default policy counts too.
    compacting = BrokerConfig(
        {"remote.log.storage.system.enable": "true", "log.cleanup.policy": policy}
    )
    with pytest.raises(ConfigError, match="compacted"):
        validate_topic_configs(compacting, TIERED)
    assert validate_topic_configs(compacting, {**TIERED, "cleanup.policy": "delete"})


@pytest.mark.parametrize(
    ("overrides", "key", "message"),
    [
        ({"retention.ms": "1000", "local.retention.ms": "1001"}, "local.retention.ms",
         r"Invalid value 1001 for configuration local\.retention\.ms: must not be more than "
         r"retention\.ms \(1000\)"),
        ({"retention.ms": "1000", "local.retention.ms": "-1"}, "local.retention.ms",
         r"must not be -1 \(no limit\) while retention\.ms is 1000"),
        ({"local.retention.ms": "604800001"}, "local.retention.ms", "more than"),
        ({"retention.bytes": "100", "local.retention.bytes": "101"}, "local.retention.bytes",
         r"must not be more than retention\.bytes \(100\)"),
        ({"retention.bytes": "100", "local.retention.bytes": "-1"}, "local.retention.bytes",
         "must not be -1"),
    ],
)  # fmt: skip
def test_local_retention_may_not_exceed_total(
    overrides: dict[str, str], key: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        validate_topic_configs(TIERING, {**TIERED, **overrides})
    assert e.value.key == key
    # Without tiering, Kafka does not compare them.
    assert validate_topic_configs(TIERING, overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        {"retention.ms": "1000", "local.retention.ms": "1000"},
        {"retention.ms": "1000", "local.retention.ms": "-2"},
        {"retention.ms": "-1", "local.retention.ms": "-1"},
        {"retention.ms": "-1", "local.retention.ms": "5000000000000"},
        {"local.retention.bytes": "-1"},  # retention.bytes is -1: no limit
        {"retention.bytes": "100", "local.retention.bytes": "0"},
    ],
)
def test_local_retention_within_total_is_accepted(overrides: dict[str, str]) -> None:
    assert validate_topic_configs(TIERING, {**TIERED, **overrides}) == {**TIERED, **overrides}


def test_local_and_total_retention_may_come_from_broker_and_topic() -> None:
    broker = BrokerConfig(
        {"remote.log.storage.system.enable": "true", "log.local.retention.ms": "3600000"}
    )
    # The broker's local retention against the topic's shorter total retention.
    with pytest.raises(ConfigError, match=r"3600000 for configuration local\.retention\.ms"):
        validate_topic_configs(broker, {**TIERED, "retention.ms": "60000"})
    # The topic's local retention against the broker's total (log.retention.hours=1).
    hourly = BrokerConfig({"remote.log.storage.system.enable": "true", "log.retention.hours": 1})
    with pytest.raises(ConfigError, match=r"more than retention\.ms \(3600000\)"):
        validate_topic_configs(hourly, {**TIERED, "local.retention.ms": "3600001"})


def test_turning_tiering_off_needs_delete_on_disable() -> None:
    for new in ({}, {"remote.storage.enable": "false"}, {"remote.log.copy.disable": "true"}):
        with pytest.raises(ConfigError, match=r"remote\.log\.delete\.on\.disable=true") as e:
            validate_topic_configs(TIERING, new, TIERED)
        assert e.value.key == "remote.storage.enable"
    off = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    assert validate_topic_configs(TIERING, off, TIERED) == off
    # Turning off is allowed on any broker (Kafka checks system enablement only for true).
    assert validate_topic_configs(NOT_TIERING, off, TIERED) == off
    # A topic that was never tiered, or stays tiered, is not turning off.
    assert validate_topic_configs(TIERING, {"remote.storage.enable": "false"}, {}) is not None
    assert validate_topic_configs(TIERING, {**TIERED, "retention.ms": "5"}, TIERED)


def test_copy_disable_needs_local_and_total_retention_to_agree() -> None:
    read_only = {**TIERED, "remote.log.copy.disable": "true"}
    assert validate_topic_configs(TIERING, read_only, TIERED) == read_only
    same = {**read_only, "retention.ms": "5000", "local.retention.ms": "5000"}
    assert validate_topic_configs(TIERING, same, TIERED) == same
    with pytest.raises(ConfigError, match=r"local\.retention\.ms \(4000\) must equal") as e:
        validate_topic_configs(
            TIERING, {**read_only, "retention.ms": "5000", "local.retention.ms": "4000"}, TIERED
        )
    assert e.value.key == "local.retention.ms"
    with pytest.raises(ConfigError, match=r"local\.retention\.bytes \(10\) must equal"):
        validate_topic_configs(
            TIERING, {**read_only, "retention.bytes": "50", "local.retention.bytes": "10"}
        )
