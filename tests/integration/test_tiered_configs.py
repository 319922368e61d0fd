"""Tiered storage configuration (KIP-405) as clients see it: a broker process, the
confluent-kafka (librdkafka) admin client, with IncrementalAlterConfigs and the legacy
AlterConfigs.

Kafka's LogConfig.validate rules answer INVALID_CONFIG with the reason in error_message
for CreateTopics, AlterConfigs and IncrementalAlterConfigs; a valid tiered topic is
created and DescribeConfigs reports its values, sources and synonyms; the broker's own
tiered storage keys and plugin keys are described; a broker whose local retention
exceeds its total retention does not start.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from support.broker import TIERCEL, BrokerProcess
from support.clients import running_broker, wait_until
from support.cluster import ClusterProcess

NONE: Final = 0
INVALID_CONFIG: Final = 40
STATIC_BROKER_CONFIG: Final = 4
DEFAULT_CONFIG: Final = 5
TOPIC_CONFIG: Final = 1  # DYNAMIC_TOPIC_CONFIG in Kafka's ConfigSource
TIERED: Final = {"remote.storage.enable": "true"}
# The legacy AlterConfigs is deprecated in librdkafka, and exercised here on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")


@pytest.fixture(scope="module")
def tiering(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("tiering")
    overrides = {
        "remote.log.storage.system.enable": "true",
        "log.local.retention.ms": 3_600_000,
        "rsm.config.dir": str(data_dir / "remote"),
        "rlmm.config.remote.log.metadata.topic.replication.factor": 1,
    }
    with running_broker(data_dir, overrides) as broker:
        yield broker


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("plain")) as broker:
        yield broker


def _error(future: Any) -> tuple[int, str]:
    try:
        future.result(20)
    except KafkaException as e:
        error = e.args[0]
        return int(error.code()), str(error.str())
    return NONE, ""


def _create(
    broker: BrokerProcess, name: str, config: dict[str, str], replicas: int = 1
) -> tuple[int, str]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    new = NewTopic(name, 1, replicas, config=config)
    return _error(admin.create_topics([new], operation_timeout=10)[name])


def _set(broker: BrokerProcess, name: str, configs: dict[str, str]) -> tuple[int, str]:
    """IncrementalAlterConfigs SET of `configs`."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
    return _error(next(iter(admin.incremental_alter_configs([resource]).values())))


def _replace(broker: BrokerProcess, name: str, configs: dict[str, str]) -> int:
    """The legacy AlterConfigs, which replaces every override of the topic."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, name, set_config=configs)
    future = next(iter(admin.alter_configs([resource]).values()))  # type: ignore[attr-defined]
    return _error(future)[0]


def _describe(broker: BrokerProcess, resource: ConfigResource) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entries: dict[str, Any] = next(
        iter(admin.describe_configs([resource], request_timeout=10).values())
    ).result(10)
    return entries


def test_tiering_is_refused_when_the_broker_does_not_tier(plain: BrokerProcess) -> None:
    code, message = _create(plain, "t-off", TIERED)
    assert code == INVALID_CONFIG
    assert "remote.log.storage.system.enable=false" in message
    assert _create(plain, "t-off", {}) == (NONE, "")
    code, message = _set(plain, "t-off", TIERED)
    assert (code, "remote.log.storage.system.enable=false" in message) == (INVALID_CONFIG, True)
    assert _replace(plain, "t-off", TIERED) == INVALID_CONFIG


def test_a_compacted_topic_cannot_be_tiered(tiering: BrokerProcess) -> None:
    code, message = _create(tiering, "t-compact", {**TIERED, "cleanup.policy": "compact"})
    assert (code, "compacted topics" in message) == (INVALID_CONFIG, True)
    assert _create(tiering, "t-compact", TIERED) == (NONE, "")
    # Making the tiered topic compacted.
    code, message = _set(tiering, "t-compact", {"cleanup.policy": "compact,delete"})
    assert (code, "compacted topics" in message) == (INVALID_CONFIG, True)
    assert _replace(tiering, "t-compact", {**TIERED, "cleanup.policy": "compact"}) == (
        INVALID_CONFIG
    )


def test_local_retention_above_total_is_refused(tiering: BrokerProcess) -> None:
    code, message = _create(
        tiering, "t-ret", {**TIERED, "retention.ms": "60000", "local.retention.ms": "60001"}
    )
    assert code == INVALID_CONFIG
    assert "local.retention.ms: must not be more than retention.ms (60000)" in message
    # The broker's log.local.retention.ms (one hour) against the topic's retention.ms.
    code, message = _create(tiering, "t-ret", {**TIERED, "retention.ms": "60000"})
    assert (code, "3600000 for configuration local.retention.ms" in message) == (
        INVALID_CONFIG,
        True,
    )
    code, message = _create(
        tiering, "t-ret", {**TIERED, "retention.bytes": "1000", "local.retention.bytes": "-1"}
    )
    assert (code, "local.retention.bytes: must not be -1" in message) == (INVALID_CONFIG, True)
    assert _create(tiering, "t-ret", {**TIERED, "retention.bytes": "1000"}) == (NONE, "")
    # Incremental: the topic keeps remote.storage.enable and retention.bytes.
    code, message = _set(tiering, "t-ret", {"local.retention.bytes": "1001"})
    assert (code, "must not be more than retention.bytes (1000)" in message) == (
        INVALID_CONFIG,
        True,
    )
    code, _ = _set(tiering, "t-ret", {"retention.ms": "1000"})  # below the broker's local
    assert code == INVALID_CONFIG
    assert _set(tiering, "t-ret", {"local.retention.bytes": "1000"}) == (NONE, "")
    # Legacy AlterConfigs replaces the whole set.
    assert _replace(tiering, "t-ret", {**TIERED, "local.retention.ms": "-1"}) == INVALID_CONFIG
    assert _replace(tiering, "t-ret", {**TIERED, "local.retention.ms": "60000"}) == NONE


def test_turning_tiering_off_needs_delete_on_disable(tiering: BrokerProcess) -> None:
    assert _create(tiering, "t-disable", TIERED) == (NONE, "")
    code, message = _set(tiering, "t-disable", {"remote.storage.enable": "false"})
    assert code == INVALID_CONFIG
    assert "remote.log.delete.on.disable=true" in message
    # The legacy API drops remote.storage.enable with the other overrides: turning off too.
    assert _replace(tiering, "t-disable", {"retention.ms": "7200000"}) == INVALID_CONFIG
    # Read-only tiering: local and total retention must then agree (the broker's local
    # retention is an hour, the topic's total a week), -2 making them one.
    code, message = _set(tiering, "t-disable", {"remote.log.copy.disable": "true"})
    assert (code, "must equal retention.ms" in message) == (INVALID_CONFIG, True)
    read_only = {"remote.log.copy.disable": "true", "local.retention.ms": "-2"}
    assert _set(tiering, "t-disable", read_only) == (NONE, "")
    off = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    assert _set(tiering, "t-disable", off) == (NONE, "")
    entries = _describe(tiering, ConfigResource(ResourceType.TOPIC, "t-disable"))
    assert entries["remote.storage.enable"].value == "false"


def test_a_tiered_topic_is_created_and_described(tiering: BrokerProcess) -> None:
    config = {**TIERED, "retention.ms": "86400000", "local.retention.bytes": "1048576"}
    assert _create(tiering, "t-tiered", config) == (NONE, "")
    entries = _describe(tiering, ConfigResource(ResourceType.TOPIC, "t-tiered"))
    e = entries["remote.storage.enable"]
    assert (e.value, int(e.source)) == ("true", TOPIC_CONFIG)
    e = entries["local.retention.bytes"]
    assert (e.value, int(e.source)) == ("1048576", TOPIC_CONFIG)
    e = entries["local.retention.ms"]
    assert (e.value, int(e.source)) == ("3600000", STATIC_BROKER_CONFIG)
    assert list(e.synonyms) == ["log.local.retention.ms"]
    for name in ("remote.log.copy.disable", "remote.log.delete.on.disable"):
        assert (entries[name].value, int(entries[name].source)) == ("false", DEFAULT_CONFIG)


def test_the_broker_describes_its_tiered_storage_keys(tiering: BrokerProcess) -> None:
    entries = _describe(tiering, ConfigResource(ResourceType.BROKER, "1"))
    e = entries["remote.log.storage.system.enable"]
    assert (e.value, int(e.source)) == ("true", STATIC_BROKER_CONFIG)
    e = entries["remote.log.reader.threads"]
    assert (e.value, int(e.source)) == ("10", DEFAULT_CONFIG)
    assert entries["remote.log.storage.manager.class.name"].value == "local"
    # Plugin keys are listed, their values withheld, as Kafka does for unknown originals.
    e = entries["rsm.config.dir"]
    assert (e.value, e.is_sensitive, int(e.source)) == (None, True, STATIC_BROKER_CONFIG)
    assert "rlmm.config.remote.log.metadata.topic.replication.factor" in entries


def test_the_rules_hold_in_a_kraft_cluster(
    cluster_factory: Callable[..., ClusterProcess],
) -> None:
    """Requests to a broker that is not the active controller's node are forwarded to the
    controller (KIP-590) and checked the same way, and the accepted configuration
    reaches the other broker through the metadata log."""
    cluster = cluster_factory(
        size=2,
        overrides={"remote.log.storage.system.enable": "true", "offsets.topic.num.partitions": 1},
    )
    controller = cluster.wait_for_controller()
    other = cluster.brokers[2 if controller == 1 else 1]
    code, message = _create(other, "c-tiered", {**TIERED, "local.retention.ms": "-1"}, 2)
    assert (code, "must not be -1" in message) == (INVALID_CONFIG, True)
    code, message = _create(other, "c-tiered", {**TIERED, "cleanup.policy": "compact"}, 2)
    assert (code, "compacted topics" in message) == (INVALID_CONFIG, True)
    assert _create(other, "c-tiered", {**TIERED, "local.retention.ms": "60000"}, 2) == (NONE, "")
    code, message = _set(other, "c-tiered", {"remote.storage.enable": "false"})
    assert (code, "remote.log.delete.on.disable=true" in message) == (INVALID_CONFIG, True)
    described = cluster.brokers[controller]
    resource = ConfigResource(ResourceType.TOPIC, "c-tiered")

    def shown() -> bool:
        try:
            entries = _describe(described, resource)
        except KafkaException:  # not in that broker's metadata cache yet
            return False
        values = (entries["local.retention.ms"].value, entries["remote.storage.enable"].value)
        return values == ("60000", "true")

    assert wait_until(shown, 20)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["remote.log.storage.system.enable=true", "log.local.retention.ms=604800001"],
            "log.local.retention.ms: must not be more than log.retention.ms (604800000)",
        ),
        (
            ["rlmm.config.remote.log.metadata.topic.partitions=5"],
            "rlmm.config.remote.log.metadata.topic.partitions",
        ),
    ],
)
def test_bad_tiered_storage_settings_stop_startup(
    tmp_path: Path, overrides: list[str], expected: str
) -> None:
    args = [a for o in overrides for a in ("--override", o)]
    result = subprocess.run(
        [str(TIERCEL), "broker", "--override", f"log.dirs={tmp_path}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert expected in result.stderr
