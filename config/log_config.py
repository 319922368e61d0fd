"""LogConfig: the effective settings of one topic's logs, and DescribeConfigs entries.

A topic's value of each key is its override when it has one, otherwise the default the
broker's synonyms give (retention.ms from log.retention.ms / .minutes / .hours, ...).
Overrides are validated and normalised once, when a topic is created or altered, and are
persisted in their canonical string form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import LONG_MAX, ConfigDef, ConfigError, ConfigSource, ConfigType
from tiercel.config.config_values import closest, parse_value, render_value
from tiercel.config.kafka_config import BROKER_CONFIGS, broker_synonyms
from tiercel.config.topic_configs import TOPIC_CONFIGS, resolve_topic_default

__all__ = [
    "ConfigEntry",
    "ConfigSynonym",
    "LogConfig",
    "describe_broker_configs",
    "describe_topic_configs",
    "topic_defaults",
    "validate_topic_overrides",
]


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Typed values of every topic config key (the key with '.' replaced by '_').

    Invariant: each field holds a value its key's validator accepts. The field defaults
    are Kafka's topic defaults, so `LogConfig()` is what a broker with no settings gives a
    topic with no overrides. Immutable; any thread.
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: tuple[str, ...] = ("delete",)
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    min_insync_replicas: int = 1
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    preallocate: bool = False
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False

    def __post_init__(self) -> None:
        # Kafka's LogConfig.localRetentionMs()/localRetentionBytes(): -2 stands for the
        # total retention; resolved once, so readers never see -2.
        if self.local_retention_ms == -2:
            object.__setattr__(self, "local_retention_ms", self.retention_ms)
        if self.local_retention_bytes == -2:
            object.__setattr__(self, "local_retention_bytes", self.retention_bytes)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """The age at which the active segment rolls: segment.ms, or max.compaction.lag.ms
        when that is shorter on a compacted topic (KIP-354), since the cleaner never
        touches the active segment."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @classmethod
    def from_overrides(cls, broker: BrokerConfig, overrides: Mapping[str, str]) -> LogConfig:
        """The topic's config: `overrides` on top of the broker's topic defaults.

        ConfigError for an unknown key (naming the closest valid one) or a bad value.
        """
        return cls._from_values(_effective(broker, overrides))

    @classmethod
    def _from_values(cls, values: Mapping[str, object]) -> LogConfig:
        fields: dict[str, Any] = {name.replace(".", "_"): v for name, v in values.items()}
        return cls(**fields)


def topic_defaults(broker: BrokerConfig) -> dict[str, object]:
    """Each topic key's default on this broker, from its broker synonyms by precedence."""
    return {
        name: resolve_topic_default(name, {s: broker.get(s) for s in defn.synonyms})
        for name, defn in TOPIC_CONFIGS.items()
    }


def validate_topic_overrides(overrides: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic overrides (CreateTopics / AlterConfigs) and return them in canonical
    form ("TRUE" -> "true", " compact , delete" -> "compact,delete"), ready to persist."""
    parsed = {name: _parse_override(name, raw) for name, raw in overrides.items()}
    min_lag = parsed.get("min.compaction.lag.ms", TOPIC_CONFIGS["min.compaction.lag.ms"].default)
    max_lag = parsed.get("max.compaction.lag.ms", TOPIC_CONFIGS["max.compaction.lag.ms"].default)
    assert isinstance(min_lag, int) and isinstance(max_lag, int)
    if min_lag > max_lag:
        raise ConfigError(
            f"Conflicting topic configs: min.compaction.lag.ms ({min_lag}) is greater than "
            f"max.compaction.lag.ms ({max_lag})",
            "min.compaction.lag.ms",
        )
    return {name: _render(TOPIC_CONFIGS[name], value) for name, value in parsed.items()}


def _parse_override(name: str, raw: str | None) -> object:
    defn = TOPIC_CONFIGS.get(name)
    if defn is None:
        # A broker key given as a topic key most likely means the topic key it defaults.
        by_synonym = [d.name for d in TOPIC_CONFIGS.values() if name in d.synonyms]
        suggestion = by_synonym[0] if by_synonym else closest(name, TOPIC_CONFIGS)
        hint = f"; did you mean {suggestion}?" if suggestion else ""
        raise ConfigError(f"Unknown topic config name: {name}{hint}", name)
    if raw is None:
        raise ConfigError(f"Null value not supported for topic configs: {name}", name)
    return parse_value(defn, raw)


def _effective(broker: BrokerConfig, overrides: Mapping[str, str]) -> dict[str, object]:
    values = topic_defaults(broker)
    for name, raw in overrides.items():
        values[name] = _parse_override(name, raw)
    return values


def _render(defn: ConfigDef, value: object) -> str:
    text = render_value(defn.type, value)
    assert text is not None
    return text


# --- DescribeConfigs ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """One place a described value could come from, as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One key of a DescribeConfigs result. `value` is Kafka's string form (None when the
    key is unset or sensitive); `source` is the first synonym's, or DEFAULT_CONFIG."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    synonyms: tuple[ConfigSynonym, ...]
    config_type: ConfigType
    documentation: str

    @property
    def is_default(self) -> bool:
        """DescribeConfigs v0's is_default flag."""
        return self.source is ConfigSource.DEFAULT_CONFIG


def describe_topic_configs(broker: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic key, sorted by name, with synonyms in Kafka's order: the topic override,
    then the broker's synonyms as set in its config file, then their defaults."""
    values = _effective(broker, overrides)
    entries = []
    for name in sorted(TOPIC_CONFIGS):
        defn = TOPIC_CONFIGS[name]
        sensitive = defn.type is ConfigType.PASSWORD
        value = None if sensitive else render_value(defn.type, values[name])
        synonyms = (
            _broker_synonyms(broker, defn.synonyms[0], broker_synonyms(defn.synonyms[0]), sensitive)
            if defn.synonyms
            else []
        )
        if name in overrides:
            synonyms.insert(0, ConfigSynonym(name, value, ConfigSource.TOPIC_CONFIG))
        entries.append(_entry(defn, value, synonyms, read_only=False))
    return entries


def describe_broker_configs(broker: BrokerConfig) -> list[ConfigEntry]:
    """Every broker key, sorted by name. All are read-only: Tiercel has no dynamic
    broker configs."""
    entries = []
    for name in sorted(BROKER_CONFIGS):
        defn = BROKER_CONFIGS[name]
        sensitive = defn.type is ConfigType.PASSWORD
        value = None if sensitive else render_value(defn.type, broker.get(name))
        synonyms = _broker_synonyms(broker, name, broker_synonyms(name), sensitive)
        entries.append(_entry(defn, value, synonyms, read_only=True))
    return entries


def _entry(
    defn: ConfigDef, value: str | None, synonyms: list[ConfigSynonym], read_only: bool
) -> ConfigEntry:
    return ConfigEntry(
        name=defn.name,
        value=value,
        source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
        read_only=read_only,
        sensitive=defn.type is ConfigType.PASSWORD,
        synonyms=tuple(synonyms),
        config_type=defn.type,
        documentation=defn.doc,
    )


def _broker_synonyms(
    broker: BrokerConfig, name: str, group: tuple[str, ...], sensitive: bool
) -> list[ConfigSynonym]:
    """Kafka's ConfigHelper.configSynonyms: the group's keys set in the config file, then
    those with a default, less any entries before the first one for `name` itself. So
    retention.ms lists nothing when only log.retention.hours is set, as in Kafka."""
    found = [
        ConfigSynonym(s, _shown(s, broker.get(s), sensitive), ConfigSource.STATIC_BROKER_CONFIG)
        for s in group
        if s in broker.explicit
    ]
    found += [
        ConfigSynonym(
            s, _shown(s, BROKER_CONFIGS[s].default, sensitive), ConfigSource.DEFAULT_CONFIG
        )
        for s in group
        if BROKER_CONFIGS[s].default is not None
    ]
    names = [synonym.name for synonym in found]
    return found[names.index(name) :] if name in names else []


def _shown(name: str, value: object, sensitive: bool) -> str | None:
    return None if sensitive else render_value(BROKER_CONFIGS[name].type, value)
