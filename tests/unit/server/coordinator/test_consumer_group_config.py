"""The group.consumer.* broker keys as the group coordinator reads them."""

from __future__ import annotations

import pytest

from tiercel.config.broker_config import BrokerConfig, ConfigError
from tiercel.server.coordinator.group.group_config import GroupCoordinatorConfig


def test_defaults_are_kafkas() -> None:
    config = GroupCoordinatorConfig.from_broker_config(BrokerConfig({}))
    assert config.consumer_group_heartbeat_interval_ms == 5000
    assert config.consumer_group_session_timeout_ms == 45000
    assert config.consumer_group_max_size == 2**31 - 1
    assert config.consumer_group_assignors == ("uniform", "range")


def test_assignors_by_kafka_class_name_or_short_name() -> None:
    kafka_range = "org.apache.kafka.coordinator.group.assignor.RangeAssignor"
    raw = {"group.consumer.assignors": f"range,{kafka_range}"}
    config = GroupCoordinatorConfig.from_broker_config(BrokerConfig(raw))
    assert config.consumer_group_assignors == ("range",)
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"group.consumer.assignors": "sticky"})
    assert e.value.key == "group.consumer.assignors"


def test_heartbeat_interval_must_be_below_the_session_timeout() -> None:
    raw = {
        "group.consumer.session.timeout.ms": 2000,
        "group.consumer.heartbeat.interval.ms": 2000,
    }
    with pytest.raises(ConfigError) as e:
        GroupCoordinatorConfig.from_broker_config(BrokerConfig(raw))
    assert e.value.key == "group.consumer.heartbeat.interval.ms"
