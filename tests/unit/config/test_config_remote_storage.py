"""Tiered storage configuration (KIP-405): the broker keys with Kafka 4's defaults, the
topic keys and their synonyms, the plugin prefixes, the typed RemoteLogManagerConfig and
the broker's own local-retention check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tiercel.config.broker_config import BrokerConfig, ConfigError
from tiercel.config.config_def import LONG_MAX, ConfigSource, ConfigType
from tiercel.config.kafka_config import BROKER_CONFIGS
from tiercel.config.loader import load_broker_config
from tiercel.config.log_config import (
    ConfigEntry,
    ConfigSynonym,
    LogConfig,
    describe_broker_configs,
    describe_topic_configs,
)
from tiercel.config.remote_log_manager_config import RemoteLogManagerConfig
from tiercel.config.remote_log_manager_configs import REMOTE_LOG_MANAGER_CONFIGS
from tiercel.config.remote_storage_props import (
    RLMM_CONFIGS,
    TopicBasedRemoteLogMetadataManagerConfig,
)
from tiercel.config.topic_configs import TOPIC_CONFIGS

DEFAULT = ConfigSource.DEFAULT_CONFIG
STATIC = ConfigSource.STATIC_BROKER_CONFIG
TOPIC = ConfigSource.TOPIC_CONFIG

# Kafka 4's RemoteLogManagerConfig: type and default of each key (the storage manager's
# class name has no default in Kafka; Tiercel's is its local-directory implementation).
KAFKA_BROKER_KEYS = {
    "remote.log.storage.system.enable": (ConfigType.BOOLEAN, False),
    "remote.log.storage.manager.class.name": (ConfigType.STRING, "local"),
    "remote.log.storage.manager.impl.prefix": (ConfigType.STRING, "rsm.config."),
    "remote.log.metadata.manager.impl.prefix": (ConfigType.STRING, "rlmm.config."),
    "remote.log.manager.task.interval.ms": (ConfigType.LONG, 30000),
    "remote.log.manager.task.retry.backoff.ms": (ConfigType.LONG, 500),
    "remote.log.manager.task.retry.backoff.max.ms": (ConfigType.LONG, 30000),
    "remote.log.manager.task.retry.jitter": (ConfigType.DOUBLE, 0.2),
    "remote.log.manager.copier.thread.pool.size": (ConfigType.INT, 10),
    "remote.log.manager.expiration.thread.pool.size": (ConfigType.INT, 10),
    "remote.log.reader.threads": (ConfigType.INT, 10),
    "remote.log.reader.max.pending.tasks": (ConfigType.INT, 100),
    "remote.fetch.max.wait.ms": (ConfigType.INT, 500),
    "remote.log.index.file.cache.total.size.bytes": (ConfigType.LONG, 1073741824),
    "remote.log.manager.copy.max.bytes.per.second": (ConfigType.LONG, LONG_MAX),
    "remote.log.manager.fetch.max.bytes.per.second": (ConfigType.LONG, LONG_MAX),
    "log.local.retention.ms": (ConfigType.LONG, -2),
    "log.local.retention.bytes": (ConfigType.LONG, -2),
}
KAFKA_TOPIC_KEYS = {
    "remote.storage.enable": (ConfigType.BOOLEAN, False),
    "local.retention.ms": (ConfigType.LONG, -2),
    "local.retention.bytes": (ConfigType.LONG, -2),
    "remote.log.copy.disable": (ConfigType.BOOLEAN, False),
    "remote.log.delete.on.disable": (ConfigType.BOOLEAN, False),
}


def test_broker_keys_have_kafkas_types_and_defaults() -> None:
    assert {d.name for d in REMOTE_LOG_MANAGER_CONFIGS} == set(KAFKA_BROKER_KEYS)
    for name, (kind, default) in KAFKA_BROKER_KEYS.items():
        assert (BROKER_CONFIGS[name].type, BROKER_CONFIGS[name].default) == (kind, default)


def test_topic_keys_have_kafkas_types_defaults_and_synonyms() -> None:
    for name, (kind, default) in KAFKA_TOPIC_KEYS.items():
        assert (TOPIC_CONFIGS[name].type, TOPIC_CONFIGS[name].default) == (kind, default)
    assert TOPIC_CONFIGS["local.retention.ms"].synonyms == ("log.local.retention.ms",)
    assert TOPIC_CONFIGS["local.retention.bytes"].synonyms == ("log.local.retention.bytes",)
    for name in (
        "remote.storage.enable",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
    ):
        assert TOPIC_CONFIGS[name].synonyms == ()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("remote.log.manager.task.retry.jitter", "0.6", "between 0 and 0.5"),
        ("remote.log.manager.copier.thread.pool.size", "0", "at least 1"),
        ("remote.log.manager.expiration.thread.pool.size", "-1", "at least 1"),
        ("remote.log.reader.threads", "0", "at least 1"),
        ("remote.fetch.max.wait.ms", "0", "at least 1"),
        ("remote.log.index.file.cache.total.size.bytes", "0", "at least 1"),
        ("remote.log.manager.copy.max.bytes.per.second", "0", "at least 1"),
        ("log.local.retention.ms", "-3", "at least -2"),
        ("log.local.retention.bytes", "-3", "at least -2"),
        ("remote.log.storage.manager.impl.prefix", " ", "must not be empty"),
        ("remote.log.storage.system.enable", "yes", "BOOLEAN"),
        ("remote.log.storage.manager.class.name", "hdfs", "local or s3, or a class"),
        ("remote.log.storage.manager.class.name", "my.module.Class", "package.module:ClassName"),
        ("remote.log.storage.manager.class.name", "my.module:", "package.module:ClassName"),
    ],
)
def test_bad_broker_values(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        BrokerConfig({key: value})
    assert e.value.key == key


@pytest.mark.parametrize("name", ["local", "s3", "acme_rsm:Store", "acme.tiered.rsm:Store.Inner"])
def test_storage_manager_class_names(name: str) -> None:
    assert (
        BrokerConfig({"remote.log.storage.manager.class.name": name}).get(
            "remote.log.storage.manager.class.name"
        )
        == name
    )


def test_plugin_keys_pass_through_with_the_prefix_removed(tmp_path: Path) -> None:
    path = tmp_path / "broker.yaml"
    path.write_text(
        "rsm.config.dir: /tmp/tier\n"
        "rsm.config.bucket.name: b1\n"
        "rsm.config.retries: 3\n"
        "rsm.config.path.style: true\n"
        "rlmm.config.remote.log.metadata.topic.num.partitions: 5\n",
        encoding="utf-8",
    )
    broker = load_broker_config(str(path), ["rsm.config.dir=/other", "num.partitions=2"])
    assert broker.remote_storage_manager_props() == {
        "dir": "/other",
        "bucket.name": "b1",
        "retries": "3",
        "path.style": "true",
    }
    assert broker.remote_log_metadata_manager_props() == {
        "remote.log.metadata.topic.num.partitions": "5"
    }
    assert broker.num_partitions == 2
    assert broker.explicit == {"num.partitions"}


def test_custom_prefixes_decide_what_passes_through() -> None:
    broker = BrokerConfig(
        {
            "remote.log.storage.manager.impl.prefix": "s3.",
            "remote.log.metadata.manager.impl.prefix": "meta.",
            "s3.region": "eu-west-1",
            "meta.remote.log.metadata.topic.replication.factor": "1",
        }
    )
    assert broker.remote_storage_manager_props() == {"region": "eu-west-1"}
    rlm = RemoteLogManagerConfig.from_broker(broker)
    assert rlm.remote_log_metadata_manager_config().metadata_topic_replication_factor == 1
    # Under other prefixes, rsm.config. is no longer special.
    with pytest.raises(ConfigError, match=r"Unknown broker configuration rsm\.config\.dir"):
        BrokerConfig({"remote.log.storage.manager.impl.prefix": "s3.", "rsm.config.dir": "/x"})


def test_prefix_problems_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="overlap"):
        BrokerConfig({"remote.log.metadata.manager.impl.prefix": "rsm."})
    with pytest.raises(ConfigError, match=r"rsm\.config\. names no property"):
        BrokerConfig({"rsm.config.": "x"})
    with pytest.raises(ConfigError, match="cannot be null"):
        BrokerConfig({"rsm.config.dir": None})
    with pytest.raises(ConfigError, match="single value, not a list"):
        BrokerConfig({"rsm.config.dirs": ["a", "b"]})


def test_the_metadata_manager_keys_are_typed_with_kafkas_defaults() -> None:
    assert {n: d.default for n, d in RLMM_CONFIGS.items()} == {
        "remote.log.metadata.topic.replication.factor": 3,
        "remote.log.metadata.topic.num.partitions": 50,
        "remote.log.metadata.topic.retention.ms": -1,
    }
    assert RLMM_CONFIGS["remote.log.metadata.topic.replication.factor"].type is ConfigType.SHORT
    assert TopicBasedRemoteLogMetadataManagerConfig.from_props({}) == (
        TopicBasedRemoteLogMetadataManagerConfig(3, 50, -1)
    )
    given = {
        "remote.log.metadata.topic.replication.factor": "1",
        "remote.log.metadata.topic.num.partitions": "7",
        "remote.log.metadata.topic.retention.ms": "86400000",
    }
    assert TopicBasedRemoteLogMetadataManagerConfig.from_props(given) == (
        TopicBasedRemoteLogMetadataManagerConfig(1, 7, 86400000)
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("rlmm.config.remote.log.metadata.topic.num.partitions", "0", "at least 1"),
        ("rlmm.config.remote.log.metadata.topic.replication.factor", "40000", "SHORT"),
        (
            "rlmm.config.remote.log.metadata.topic.retention.ms",
            "0",
            "-1 \\(no limit\\) or positive",
        ),
        (
            "rlmm.config.remote.log.metadata.topic.retention.ms",
            "-5",
            "-1 \\(no limit\\) or positive",
        ),
        (
            "rlmm.config.remote.log.metadata.topic.num.partition",
            "5",
            "would ignore it; did you mean rlmm.config.remote.log.metadata.topic.num.partitions",
        ),
        ("rlmm.config.remote.log.metadata.consume.wait.ms", "5", "would ignore it"),
    ],
)
def test_bad_metadata_manager_keys_stop_startup(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        BrokerConfig({key: value})
    assert e.value.key == key


def test_remote_log_manager_config_has_a_field_per_key() -> None:
    names = [f.name for f in dataclasses.fields(RemoteLogManagerConfig)]
    assert names == [
        *(d.name.replace(".", "_") for d in REMOTE_LOG_MANAGER_CONFIGS),
        "remote_storage_manager_props",
        "remote_log_metadata_manager_props",
    ]
    rlm = RemoteLogManagerConfig.from_broker(BrokerConfig({}))
    assert {f: getattr(rlm, f) for f in names[:-2]} == {
        n.replace(".", "_"): d for n, (_, d) in KAFKA_BROKER_KEYS.items()
    }
    assert rlm.remote_storage_manager_props == {}
    assert rlm.remote_log_metadata_manager_config() == TopicBasedRemoteLogMetadataManagerConfig()


def test_remote_log_manager_config_reflects_the_broker() -> None:
    broker = BrokerConfig(
        {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "s3",
            "remote.log.reader.threads": 4,
            "remote.log.manager.task.retry.jitter": "0.5",
            "log.local.retention.ms": "60000",
            "rsm.config.bucket": "b",
        }
    )
    rlm = RemoteLogManagerConfig.from_broker(broker)
    assert rlm.remote_log_storage_system_enable is True
    assert broker.remote_log_storage_system_enable is True
    assert rlm.remote_log_storage_manager_class_name == "s3"
    assert rlm.remote_log_reader_threads == 4
    assert rlm.remote_log_manager_task_retry_jitter == 0.5
    assert rlm.log_local_retention_ms == 60000
    assert rlm.remote_storage_manager_props == {"bucket": "b"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        rlm.remote_log_reader_threads = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        rlm.remote_storage_manager_props["bucket"] = "c"  # type: ignore[index]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"log.local.retention.ms": "604800001"}, r"log\.local\.retention\.ms: must not be more"),
        ({"log.retention.hours": 1, "log.local.retention.ms": "3600001"}, "more than"),
        ({"log.local.retention.ms": "-1"}, r"must not be -1 \(no limit\) while log\.retention\.ms"),
        (
            {"log.retention.bytes": "100", "log.local.retention.bytes": "101"},
            r"log\.local\.retention\.bytes: must not be more than log\.retention\.bytes \(100\)",
        ),
        ({"log.retention.bytes": "100", "log.local.retention.bytes": "-1"}, "must not be -1"),
    ],
)
def test_local_retention_above_total_stops_a_tiering_broker(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig({"remote.log.storage.system.enable": "true", **settings})
    # As Kafka's LogManager, only a broker that tiers checks its defaults.
    BrokerConfig(settings)


@pytest.mark.parametrize(
    "settings",
    [
        {"log.local.retention.ms": "3600000"},
        {"log.local.retention.ms": "604800000", "log.local.retention.bytes": "-2"},
        {"log.retention.ms": "-1", "log.local.retention.ms": "-1"},
        {"log.retention.ms": "-1", "log.local.retention.ms": "999999999999"},
        {"log.local.retention.bytes": "-1"},  # log.retention.bytes is -1: no limit
        {"log.retention.bytes": "100", "log.local.retention.bytes": "100"},
    ],
)
def test_local_retention_within_total_is_accepted(settings: dict[str, object]) -> None:
    BrokerConfig({"remote.log.storage.system.enable": "true", **settings})


def test_log_config_resolves_local_retention_as_kafka() -> None:
    default = LogConfig()
    assert (default.local_retention_ms_config, default.local_retention_ms) == (-2, 604800000)
    assert (default.local_retention_bytes_config, default.local_retention_bytes) == (-2, -1)
    assert not default.remote_storage_enable
    assert not default.remote_log_copy_disable and not default.remote_log_delete_on_disable
    broker = BrokerConfig({"log.local.retention.bytes": "4096", "log.retention.hours": 2})
    c = LogConfig.from_overrides(
        broker,
        {"remote.storage.enable": "true", "local.retention.ms": "1000", "retention.bytes": "9000"},
    )
    assert c.remote_storage_enable
    assert (c.local_retention_ms, c.local_retention_bytes) == (1000, 4096)
    assert LogConfig.from_overrides(broker, {}).local_retention_ms == 7_200_000
    assert LogConfig.from_overrides(broker, {"local.retention.ms": "-1"}).local_retention_ms == -1


def _entry(entries: list[ConfigEntry], name: str) -> ConfigEntry:
    return next(e for e in entries if e.name == name)


def test_describe_topic_shows_the_remote_keys_with_sources_and_synonyms() -> None:
    broker = BrokerConfig({"log.local.retention.ms": "60000"})
    entries = describe_topic_configs(broker, {"remote.storage.enable": "true"})
    e = _entry(entries, "remote.storage.enable")
    assert (e.value, e.source, e.synonyms) == (
        "true",
        TOPIC,
        (ConfigSynonym("remote.storage.enable", "true", TOPIC),),
    )
    assert e.config_type is ConfigType.BOOLEAN and e.documentation
    e = _entry(entries, "remote.log.copy.disable")
    assert (e.value, e.source, e.synonyms) == ("false", DEFAULT, ())
    e = _entry(entries, "local.retention.ms")
    assert (e.value, e.source) == ("60000", STATIC)
    assert e.synonyms == (
        ConfigSynonym("log.local.retention.ms", "60000", STATIC),
        ConfigSynonym("log.local.retention.ms", "-2", DEFAULT),
    )
    e = _entry(entries, "local.retention.bytes")
    assert (e.value, e.source, e.synonyms) == (
        "-2",
        DEFAULT,
        (ConfigSynonym("log.local.retention.bytes", "-2", DEFAULT),),
    )


def test_describe_broker_shows_the_keys_and_withholds_plugin_values() -> None:
    broker = BrokerConfig(
        {
            "remote.log.storage.system.enable": "true",
            "rsm.config.secret.access.key": "s3cr3t",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "5",
        }
    )
    entries = describe_broker_configs(broker)
    e = _entry(entries, "remote.log.storage.system.enable")
    assert (e.value, e.source, e.read_only) == ("true", STATIC, True)
    e = _entry(entries, "remote.log.manager.task.retry.jitter")
    assert (e.value, e.source, e.config_type) == ("0.2", DEFAULT, ConfigType.DOUBLE)
    # Kafka lists originals it has no definition for as sensitive, type UNKNOWN.
    plugin = [e for e in entries if e.name.startswith(("rsm.", "rlmm."))]
    assert [e.name for e in plugin] == [
        "rlmm.config.remote.log.metadata.topic.num.partitions",
        "rsm.config.secret.access.key",
    ]
    for e in plugin:
        assert (e.value, e.sensitive, e.source, e.config_type) == (
            None,
            True,
            STATIC,
            ConfigType.UNKNOWN,
        )
        assert e.synonyms == (ConfigSynonym(e.name, None, STATIC),)
    assert "s3cr3t" not in repr(broker)
