"""ConfigurationControlManager: IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT)
and AlterConfigs on topics and brokers as ConfigRecords, validated with the topic config
definitions, and the topic's unclean.leader.election.enable."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from control_manager_support import ManagersContext

from tiercel.config.config_def import ConfigError
from tiercel.protocol.errors import InvalidConfigError, UnknownTopicOrPartitionError
from tiercel.protocol.metadata.config_records import ConfigRecord
from tiercel.server.controller.configuration_control_manager import (
    ConfigResource,
    ConfigResourceType,
    OpType,
)
from tiercel.server.controller.controller_exceptions import BrokerIdNotRegisteredError

T = ConfigResource(ConfigResourceType.TOPIC, "t")
CLUSTER = ConfigResource(ConfigResourceType.BROKER, "")


@pytest.fixture
def ctx() -> ManagersContext:
    context = ManagersContext()
    context.add_brokers(1)
    context.create_topic("t")
    return context


def test_set_and_delete_write_config_records(ctx: ManagersContext) -> None:
    result = ctx.state.configuration.incremental_alter_configs(
        {T: {"retention.ms": (OpType.SET, "1000"), "segment.ms": (OpType.DELETE, None)}}
    )
    assert result.response == {T: None}
    assert [r.message for r in result.records] == [
        ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value="1000")
    ]
    ctx.run(result)
    assert ctx.state.configuration.configs(T) == {"retention.ms": "1000"}
    ctx.run(
        ctx.state.configuration.incremental_alter_configs(
            {T: {"retention.ms": (OpType.DELETE, None)}}
        )
    )
    assert ctx.state.configuration.configs(T) == {}


def test_append_and_subtract_only_on_list_configs(ctx: ManagersContext) -> None:
    ctx.run(
        ctx.state.configuration.incremental_alter_configs(
            {T: {"cleanup.policy": (OpType.APPEND, "compact")}}
        )
    )
    assert ctx.state.configuration.configs(T) == {"cleanup.policy": "compact"}
    ctx.run(
        ctx.state.configuration.incremental_alter_configs(
            {T: {"cleanup.policy": (OpType.APPEND, "delete")}}
        )
    )
    assert ctx.state.configuration.configs(T) == {"cleanup.policy": "compact,delete"}
    ctx.run(
        ctx.state.configuration.incremental_alter_configs(
            {T: {"cleanup.policy": (OpType.SUBTRACT, "compact")}}
        )
    )
    assert ctx.state.configuration.configs(T) == {"cleanup.policy": "delete"}
    result = ctx.state.configuration.incremental_alter_configs(
        {T: {"retention.ms": (OpType.APPEND, "5")}}
    )
    error = result.response[T]
    assert isinstance(error, InvalidConfigError)
    assert error.message == "Can't APPEND to key retention.ms because its type is not LIST."


def test_invalid_values_and_unknown_resources_write_nothing(ctx: ManagersContext) -> None:
    missing = ConfigResource(ConfigResourceType.TOPIC, "missing")
    result = ctx.state.configuration.incremental_alter_configs(
        {
            T: {"retention.ms": (OpType.SET, "forever")},
            missing: {"retention.ms": (OpType.SET, "5")},
            ConfigResource(ConfigResourceType.BROKER, "9"): {"x": (OpType.SET, "1")},
        }
    )
    assert result.records == []
    assert isinstance(result.response[T], InvalidConfigError)
    assert isinstance(result.response[missing], UnknownTopicOrPartitionError)
    assert isinstance(
        result.response[ConfigResource(ConfigResourceType.BROKER, "9")],
        BrokerIdNotRegisteredError,
    )


def test_legacy_alter_configs_replaces_the_whole_config(ctx: ManagersContext) -> None:
    ctx.run(
        ctx.state.configuration.incremental_alter_configs(
            {T: {"retention.ms": (OpType.SET, "1"), "segment.ms": (OpType.SET, "100000")}}
        )
    )
    ctx.run(ctx.state.configuration.legacy_alter_configs({T: {"segment.ms": "200000"}}))
    assert ctx.state.configuration.configs(T) == {"segment.ms": "200000"}


def test_broker_configs_are_written_even_unchanged_and_validated() -> None:
    refused: list[Mapping[str, str]] = []

    def validate(configs: Mapping[str, str]) -> None:
        if "bad" in configs:
            refused.append(configs)
            raise ConfigError("bad is not a broker config", "bad")

    ctx = ManagersContext(validate_broker_configs=validate)
    ctx.add_brokers(1)
    broker = ConfigResource(ConfigResourceType.BROKER, "1")
    for _ in range(2):
        result = ctx.state.configuration.incremental_alter_configs(
            {broker: {"log.retention.ms": (OpType.SET, "5")}}
        )
        assert len(result.records) == 1  # KAFKA-14136: brokers reload on every write
        ctx.run(result)
    bad = ctx.state.configuration.incremental_alter_configs({broker: {"bad": (OpType.SET, "1")}})
    assert isinstance(bad.response[broker], InvalidConfigError) and refused


def test_topic_configs_are_judged_by_the_node_with_the_existing_ones() -> None:
    """The node's validator sees a topic's whole new config and its existing one: turning
    tiering off is refused from what the topic had (log_config_validator's rule)."""
    judged: list[tuple[dict[str, str], dict[str, str]]] = []

    def validate(new: Mapping[str, str], existing: Mapping[str, str]) -> None:
        judged.append((dict(new), dict(existing)))
        if existing.get("remote.storage.enable") == "true" and "remote.storage.enable" not in new:
            raise ConfigError("tiering cannot be turned off this way", "remote.storage.enable")

    ctx = ManagersContext(validate_topic_configs=validate)
    ctx.add_brokers(1)
    ctx.create_topic("t")
    tiered = {T: {"remote.storage.enable": (OpType.SET, "true")}}
    ctx.run(ctx.state.configuration.incremental_alter_configs(tiered))
    assert judged[-1] == ({"remote.storage.enable": "true"}, {})
    off = {T: {"remote.storage.enable": (OpType.DELETE, None)}}
    refused = ctx.state.configuration.incremental_alter_configs(off)
    assert isinstance(refused.response[T], InvalidConfigError)
    assert refused.records == []
    assert judged[-1] == ({}, {"remote.storage.enable": "true"})


def test_unclean_leader_election_setting_precedence() -> None:
    ctx = ManagersContext(unclean_leader_election_enable=True)
    ctx.add_brokers(1)
    ctx.create_topic("t")
    configuration = ctx.state.configuration
    assert configuration.unclean_leader_election_enabled_for_topic("t")
    ctx.run(
        configuration.incremental_alter_configs(
            {CLUSTER: {"unclean.leader.election.enable": (OpType.SET, "false")}}
        )
    )
    assert not configuration.unclean_leader_election_enabled_for_topic("t")
    ctx.run(
        configuration.incremental_alter_configs(
            {T: {"unclean.leader.election.enable": (OpType.SET, "true")}}
        )
    )
    assert configuration.unclean_leader_election_enabled_for_topic("t")
