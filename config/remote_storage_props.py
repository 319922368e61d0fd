"""The broker keys passed through to the tiered storage plugins, and the metadata
manager's own keys.

As Kafka's `RemoteLogManagerConfig.remoteStorageManagerProps()` and
`remoteLogMetadataManagerProps()` (`AbstractConfig.originalsWithPrefix`), a broker key
that starts with remote.log.storage.manager.impl.prefix (rsm.config.) or
remote.log.metadata.manager.impl.prefix (rlmm.config.) is not a broker key: it goes,
prefix removed and as text, to the RemoteStorageManager or the RemoteLogMetadataManager.
The RSM factory checks its own keys. Tiercel's metadata manager reads only the three keys
of Kafka's `TopicBasedRemoteLogMetadataManagerConfig` below, so any other key under the
RLMM prefix is refused at startup rather than ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from tiercel.config.config_def import ConfigDef, ConfigError, ConfigType, at_least
from tiercel.config.config_values import closest, parse_value, render_value
from tiercel.config.kafka_config import BROKER_CONFIGS, canonical_broker_name

__all__ = [
    "RLMM_CONFIGS",
    "RemoteStorageProps",
    "TopicBasedRemoteLogMetadataManagerConfig",
    "split_remote_storage_props",
]

RSM_PREFIX_KEY: Final = "remote.log.storage.manager.impl.prefix"
RLMM_PREFIX_KEY: Final = "remote.log.metadata.manager.impl.prefix"

# fmt: off
RLMM_CONFIGS: Final[Mapping[str, ConfigDef]] = {d.name: d for d in (
    ConfigDef("remote.log.metadata.topic.replication.factor", ConfigType.SHORT, 3, at_least(1),
              "Replication factor of the __remote_log_metadata topic."),
    ConfigDef("remote.log.metadata.topic.num.partitions", ConfigType.INT, 50, at_least(1),
              "Partition count of the __remote_log_metadata topic."),
    ConfigDef("remote.log.metadata.topic.retention.ms", ConfigType.LONG, -1, None,
              "Retention of the __remote_log_metadata topic (-1: no limit); keep it above "
              "the retention of every tiered topic."),
)}
# fmt: on


def _frozen(mapping: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class RemoteStorageProps:
    """The plugin keys of a broker config, prefix removed, values as text.

    Invariant: `rlmm` holds only RLMM_CONFIGS keys with valid values. Immutable; any thread.
    """

    rsm_prefix: str
    rlmm_prefix: str
    rsm: Mapping[str, str]
    rlmm: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class TopicBasedRemoteLogMetadataManagerConfig:
    """The metadata manager's settings (Kafka's TopicBasedRemoteLogMetadataManagerConfig
    accessors). Invariant: each value passed its RLMM_CONFIGS check, and the retention is
    -1 or positive. Immutable; any thread."""

    metadata_topic_replication_factor: int = 3
    metadata_topic_partitions_count: int = 50
    metadata_topic_retention_ms: int = -1

    @classmethod
    def from_props(
        cls, props: Mapping[str, str], prefix: str = "rlmm.config."
    ) -> TopicBasedRemoteLogMetadataManagerConfig:
        """The settings `props` (keys without `prefix`) give; ConfigError, naming the key
        with its prefix, for a key Tiercel does not read or a bad value."""
        values: dict[str, Any] = {name: d.default for name, d in RLMM_CONFIGS.items()}
        for name, text in props.items():
            defn = RLMM_CONFIGS.get(name)
            if defn is None:
                raise _unknown_rlmm_key(prefix, name)
            values[name] = parse_value(defn, text, prefix + name)
        retention = values["remote.log.metadata.topic.retention.ms"]
        if retention != -1 and retention <= 0:
            key = prefix + "remote.log.metadata.topic.retention.ms"
            raise ConfigError(
                f"Invalid value {retention} for configuration {key}: must be -1 (no limit) "
                f"or positive",
                key,
            )
        return cls(
            values["remote.log.metadata.topic.replication.factor"],
            values["remote.log.metadata.topic.num.partitions"],
            retention,
        )


def _unknown_rlmm_key(prefix: str, name: str) -> ConfigError:
    known = [prefix + n for n in RLMM_CONFIGS]
    suggestion = closest(prefix + name, known)
    hint = f"; did you mean {suggestion}?" if suggestion else f"; it reads {', '.join(known)}"
    return ConfigError(
        f"Unknown RemoteLogMetadataManager configuration {prefix}{name}: Tiercel's metadata "
        f"manager would ignore it{hint}",
        prefix + name,
    )


def split_remote_storage_props(
    raw: Mapping[str, object],
) -> tuple[dict[str, object], RemoteStorageProps]:
    """`raw` without its plugin keys, and those keys by plugin. A key that is a broker key
    stays one even if it starts with a prefix. ConfigError for an empty, clashing or
    invalid prefix, a plugin key with no name or no single value, or a bad RLMM key."""
    rsm_prefix = _prefix(raw, RSM_PREFIX_KEY)
    rlmm_prefix = _prefix(raw, RLMM_PREFIX_KEY)
    if rsm_prefix.startswith(rlmm_prefix) or rlmm_prefix.startswith(rsm_prefix):
        raise ConfigError(
            f"{RSM_PREFIX_KEY} ({rsm_prefix}) and {RLMM_PREFIX_KEY} ({rlmm_prefix}) overlap, "
            f"so a key could not be told apart; choose prefixes neither of which starts "
            f"the other",
            RLMM_PREFIX_KEY,
        )
    rest: dict[str, object] = {}
    rsm: dict[str, str] = {}
    rlmm: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or canonical_broker_name(key) in BROKER_CONFIGS:
            rest[key] = value
        elif key.startswith(rsm_prefix):
            rsm[_name(key, rsm_prefix)] = _text(key, value)
        elif key.startswith(rlmm_prefix):
            rlmm[_name(key, rlmm_prefix)] = _text(key, value)
        else:
            rest[key] = value
    TopicBasedRemoteLogMetadataManagerConfig.from_props(rlmm, rlmm_prefix)
    return rest, RemoteStorageProps(rsm_prefix, rlmm_prefix, _frozen(rsm), _frozen(rlmm))


def _prefix(raw: Mapping[str, object], key: str) -> str:
    defn = BROKER_CONFIGS[key]
    given = raw.get(key)
    value = defn.default if given is None else parse_value(defn, given, key)
    assert isinstance(value, str)
    return value


def _name(key: str, prefix: str) -> str:
    name = key[len(prefix) :]
    if not name.strip():
        raise ConfigError(f"Configuration {key} names no property after the prefix {prefix}", key)
    return name


def _text(key: str, value: object) -> str:
    """The value as the plugin gets it: text, booleans as Kafka writes them."""
    if value is None:
        raise ConfigError(f"Configuration {key} needs a value; it cannot be null", key)
    if isinstance(value, bool):
        text = render_value(ConfigType.BOOLEAN, value)
        assert text is not None
        return text
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigError(
        f"Configuration {key} must be a single value, not a {type(value).__name__}", key
    )
