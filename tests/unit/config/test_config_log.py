"""LogConfig, topic override validation, and DescribeConfigs entries."""

from __future__ import annotations

import dataclasses

import pytest

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError, ConfigSource, ConfigType
from tiercel.config.kafka_config import BROKER_CONFIGS
from tiercel.config.log_config import (
    ConfigEntry,
    ConfigSynonym,
    LogConfig,
    describe_broker_configs,
    describe_topic_configs,
    field_name,
    topic_defaults,
    validate_topic_overrides,
)
from tiercel.config.topic_configs import TOPIC_CONFIGS

DEFAULT = ConfigSource.DEFAULT_CONFIG
STATIC = ConfigSource.STATIC_BROKER_CONFIG
TOPIC = ConfigSource.TOPIC_CONFIG


def test_fields_mirror_the_topic_keys() -> None:
    names = {f.name for f in dataclasses.fields(LogConfig)}
    assert names == {field_name(name) for name in TOPIC_CONFIGS}
    assert field_name("retention.ms") == "retention_ms"
    assert field_name("local.retention.ms") == "local_retention_ms_config"


def test_field_defaults_are_what_a_default_broker_gives() -> None:
    assert LogConfig() == LogConfig.from_overrides(BrokerConfig({}), {})
    assert dataclasses.asdict(LogConfig()) == {
        field_name(name): d.default for name, d in TOPIC_CONFIGS.items()
    }


def test_from_overrides_layers_overrides_on_broker_defaults() -> None:
    broker = BrokerConfig({"log.retention.hours": 1, "log.segment.bytes": 1000})
    c = LogConfig.from_overrides(
        broker,
        {"segment.bytes": "2048", "cleanup.policy": "compact,delete", "flush.messages": "7"},
    )
    assert c.segment_bytes == 2048
    assert c.retention_ms == 3_600_000
    assert c.cleanup_policy == ("compact", "delete")
    assert c.compact and c.delete
    assert c.flush_messages == 7


def test_compact_and_delete_follow_cleanup_policy() -> None:
    assert LogConfig().delete and not LogConfig().compact
    compacted = LogConfig(cleanup_policy=("compact",))
    assert compacted.compact and not compacted.delete
    assert not LogConfig(cleanup_policy=()).delete


def test_log_config_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        LogConfig().segment_bytes = 1  # type: ignore[misc]


def test_from_overrides_rejects_unknown_keys_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"Unknown topic config name: retention\.msx") as e:
        LogConfig.from_overrides(BrokerConfig({}), {"retention.msx": "1"})
    assert e.value.key == "retention.msx"
    assert "did you mean retention.ms?" in str(e.value)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("segment.bytes", "13", "at least 14"),
        ("segment.bytes", "abc", "INT"),
        ("retention.ms", "-2", "at least -1"),
        ("cleanup.policy", "delete,purge", "compact, delete"),
        ("message.timestamp.type", "NowTime", "CreateTime, LogAppendTime"),
        ("compression.type", "brotli", "uncompressed, zstd, lz4, snappy, gzip, producer"),
        ("min.cleanable.dirty.ratio", "1.5", "between 0 and 1"),
        ("min.insync.replicas", "0", "at least 1"),
        ("unclean.leader.election.enable", "yes", "BOOLEAN"),
        ("segment.ms", "0", "at least 1"),
    ],
)
def test_bad_override_values(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        validate_topic_overrides({key: value})
    assert e.value.key == key
    with pytest.raises(ConfigError, match=message):
        LogConfig.from_overrides(BrokerConfig({}), {key: value})


def test_unsupported_topic_values_are_refused_not_ignored() -> None:
    assert validate_topic_overrides({"preallocate": "false"}) == {"preallocate": "false"}
    with pytest.raises(ConfigError, match="preallocate=true is not supported by Tiercel") as e:
        validate_topic_overrides({"preallocate": "TRUE"})
    assert e.value.key == "preallocate"


def test_validate_topic_overrides_normalises_values() -> None:
    assert validate_topic_overrides(
        {
            "cleanup.policy": " compact , delete ",
            "unclean.leader.election.enable": "TRUE",
            "retention.ms": "+0086400000",
            "min.cleanable.dirty.ratio": "0.50",
            "compression.type": " zstd",
            "retention.bytes": "-1",
        }
    ) == {
        "cleanup.policy": "compact,delete",
        "unclean.leader.election.enable": "true",
        "retention.ms": "86400000",
        "min.cleanable.dirty.ratio": "0.5",
        "compression.type": "zstd",
        "retention.bytes": "-1",
    }
    assert validate_topic_overrides({}) == {}


def test_validate_topic_overrides_refuses_null_and_unknown() -> None:
    with pytest.raises(ConfigError, match=r"Null value not supported for topic configs: flush\.ms"):
        validate_topic_overrides({"flush.ms": None})
    with pytest.raises(ConfigError, match=r"did you mean segment\.bytes"):
        validate_topic_overrides({"segment.byte": "1"})
    with pytest.raises(ConfigError, match=r"did you mean retention\.ms"):
        validate_topic_overrides({"retention.msec": "1"})


def test_min_compaction_lag_may_not_exceed_max() -> None:
    with pytest.raises(ConfigError, match=r"min\.compaction\.lag\.ms") as e:
        validate_topic_overrides({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert e.value.key == "min.compaction.lag.ms"
    ok = {"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5"}
    assert validate_topic_overrides(ok) == ok


def test_topic_defaults_cover_every_topic_key() -> None:
    assert set(topic_defaults(BrokerConfig({}))) == set(TOPIC_CONFIGS)


def _by_name(entries: list[ConfigEntry]) -> dict[str, ConfigEntry]:
    return {e.name: e for e in entries}


def test_describe_topic_lists_every_key_sorted_with_types_and_docs() -> None:
    entries = describe_topic_configs(BrokerConfig({}), {})
    assert [e.name for e in entries] == sorted(TOPIC_CONFIGS)
    for e in entries:
        assert e.source is DEFAULT and e.is_default
        assert not e.read_only and not e.sensitive
        assert e.config_type is TOPIC_CONFIGS[e.name].type
        assert e.documentation == TOPIC_CONFIGS[e.name].doc
    by_name = _by_name(entries)
    assert by_name["cleanup.policy"].value == "delete"
    assert by_name["min.cleanable.dirty.ratio"].value == "0.5"
    assert by_name["preallocate"].value == "false"
    assert by_name["flush.ms"].value == "9223372036854775807"
    assert by_name["cleanup.policy"].config_type is ConfigType.LIST


def test_describe_topic_with_an_override() -> None:
    broker = BrokerConfig({"log.segment.bytes": 4096})
    e = _by_name(describe_topic_configs(broker, {"segment.bytes": "2048"}))["segment.bytes"]
    assert (e.value, e.source, e.is_default) == ("2048", TOPIC, False)
    assert e.synonyms == (
        ConfigSynonym("segment.bytes", "2048", TOPIC),
        ConfigSynonym("log.segment.bytes", "4096", STATIC),
        ConfigSynonym("log.segment.bytes", "1073741824", DEFAULT),
    )


def test_describe_topic_value_from_a_static_broker_setting() -> None:
    e = _by_name(describe_topic_configs(BrokerConfig({"message.max.bytes": 500}), {}))[
        "max.message.bytes"
    ]
    assert (e.value, e.source) == ("500", STATIC)
    assert e.synonyms == (
        ConfigSynonym("message.max.bytes", "500", STATIC),
        ConfigSynonym("message.max.bytes", "1048588", DEFAULT),
    )


def test_describe_topic_retention_synonyms_follow_kafka() -> None:
    # Set by log.retention.ms: the group is listed, statically set keys first.
    broker = BrokerConfig({"log.retention.ms": 1000, "log.retention.hours": 5})
    e = _by_name(describe_topic_configs(broker, {}))["retention.ms"]
    assert (e.value, e.source) == ("1000", STATIC)
    assert e.synonyms == (
        ConfigSynonym("log.retention.ms", "1000", STATIC),
        ConfigSynonym("log.retention.hours", "5", STATIC),
        ConfigSynonym("log.retention.hours", "168", DEFAULT),
    )
    # Kafka drops the synonyms ahead of log.retention.ms itself, so with only the hours
    # set (or nothing), retention.ms shows its value with no synonyms and DEFAULT_CONFIG.
    e = _by_name(describe_topic_configs(BrokerConfig({"log.retention.hours": 5}), {}))[
        "retention.ms"
    ]
    assert (e.value, e.source, e.synonyms) == ("18000000", DEFAULT, ())
    # A topic override comes first; the broker group follows.
    e = _by_name(
        describe_topic_configs(BrokerConfig({"log.retention.ms": 1000}), {"retention.ms": "-1"})
    )["retention.ms"]
    assert e.synonyms == (
        ConfigSynonym("retention.ms", "-1", TOPIC),
        ConfigSynonym("log.retention.ms", "1000", STATIC),
        ConfigSynonym("log.retention.hours", "168", DEFAULT),
    )


def test_describe_topic_rejects_a_bad_persisted_override() -> None:
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        describe_topic_configs(BrokerConfig({}), {"segment.bytes": "1"})


def by_name_sensitive(entries: list[ConfigEntry]) -> set[str]:
    return {e.name for e in entries if e.sensitive}


def test_describe_broker_lists_every_key_read_only() -> None:
    broker = BrokerConfig({"num.partitions": 3, "log.retention.minutes": 10})
    entries = describe_broker_configs(broker)
    assert [e.name for e in entries] == sorted(BROKER_CONFIGS)
    # Kafka's DescribeConfigs hides every PASSWORD key's value.
    assert all(
        e.read_only and e.sensitive == (e.config_type is ConfigType.PASSWORD) for e in entries
    )
    assert by_name_sensitive(entries) == {
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.keystore.password",
        "ssl.truststore.certificates",
        "ssl.truststore.password",
    }
    by_name = _by_name(entries)
    e = by_name["num.partitions"]
    assert (e.value, e.source, e.config_type) == ("3", STATIC, ConfigType.INT)
    assert e.synonyms == (
        ConfigSynonym("num.partitions", "3", STATIC),
        ConfigSynonym("num.partitions", "1", DEFAULT),
    )
    e = by_name["auto.create.topics.enable"]
    assert (e.value, e.source, e.is_default) == ("true", DEFAULT, True)
    assert e.synonyms == (ConfigSynonym("auto.create.topics.enable", "true", DEFAULT),)
    e = by_name["advertised.listeners"]
    assert (e.value, e.source, e.synonyms) == (None, DEFAULT, ())
    e = by_name["log.dirs"]
    assert (e.value, e.config_type) == ("./data", ConfigType.LIST)


def test_describe_broker_synonym_groups() -> None:
    by_name = _by_name(describe_broker_configs(BrokerConfig({"log.retention.minutes": 10})))
    e = by_name["log.retention.minutes"]
    assert (e.value, e.source) == ("10", STATIC)
    assert e.synonyms == (
        ConfigSynonym("log.retention.minutes", "10", STATIC),
        ConfigSynonym("log.retention.hours", "168", DEFAULT),
    )
    e = by_name["log.retention.ms"]
    assert (e.value, e.source, e.synonyms) == (None, DEFAULT, ())
    e = by_name["log.retention.hours"]
    assert (e.value, e.source) == ("168", DEFAULT)
    assert e.synonyms == (ConfigSynonym("log.retention.hours", "168", DEFAULT),)
