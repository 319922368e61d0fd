"""Checks of a topic's configuration as a whole, with the broker's defaults: Kafka's
`LogConfig.validate(existingConfigs, props, configuredProps, isRemoteLogStorageSystemEnabled)`
as CreateTopics, AlterConfigs and IncrementalAlterConfigs apply it.

The tiered storage rules (KIP-405, KIP-950) look at effective values: the broker's
defaults, then the topic's overrides as they will be. So local.retention.ms set on the
topic is compared with a retention.ms that may come from the broker's log.retention.hours.
"""

from __future__ import annotations

from collections.abc import Mapping

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError
from tiercel.config.log_config import LogConfig, validate_topic_overrides
from tiercel.config.remote_log_manager_configs import local_retention_problem

__all__ = ["validate_topic_configs"]


def validate_topic_configs(
    broker: BrokerConfig,
    overrides: Mapping[str, str | None],
    existing: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Check a topic's whole new set of `overrides` (replacing its `existing` ones, none
    for a new topic) and return them in canonical form, ready to persist. ConfigError
    says what is wrong, in the sense of Kafka's message."""
    canonical = validate_topic_overrides(overrides)
    config = LogConfig.from_overrides(broker, canonical)
    if config.remote_storage_enable:
        _check_tiering_allowed(config, broker.remote_log_storage_system_enable)
    else:
        was_enabled = (existing or {}).get("remote.storage.enable", "false").lower() == "true"
        _check_turning_off(config, was_enabled)
    return canonical


def _check_tiering_allowed(config: LogConfig, system_enabled: bool) -> None:
    """The checks of a tiered topic, in the order of Kafka's validateTopicLogConfigValues."""
    # Kafka's validateRemoteStorageOnlyIfSystemEnabled.
    if not system_enabled:
        raise ConfigError(
            "Tiered storage is disabled on this broker (remote.log.storage.system.enable="
            "false), so a topic cannot set remote.storage.enable=true.",
            "remote.storage.enable",
        )
    # Kafka's validateNoRemoteStorageForCompactedTopic: compaction rewrites segments that
    # remote storage holds immutable.
    if config.compact:
        raise ConfigError(
            "Remote log storage is not supported for compacted topics: cleanup.policy "
            f"{','.join(config.cleanup_policy)} includes compact.",
            "cleanup.policy",
        )
    # Kafka's validateRemoteStorageRetentionSize, then ...Time.
    for key, local, total_key, total in (
        ("local.retention.bytes", config.local_retention_bytes_config, "retention.bytes",
         config.retention_bytes),
        ("local.retention.ms", config.local_retention_ms_config, "retention.ms",
         config.retention_ms),
    ):  # fmt: skip
        message = local_retention_problem(local, total, total_key)
        if message is not None:
            raise ConfigError(f"Invalid value {local} for configuration {key}: {message}", key)
    _check_copy_disabled(config)


def _check_copy_disabled(config: LogConfig) -> None:
    """Kafka's validateRetentionConfigsWhenRemoteCopyDisabled: with nothing more copied,
    what stays local is all there is, so local and total retention must agree."""
    if not config.remote_log_copy_disable:
        return
    for key, local, total_key, total in (
        ("local.retention.bytes", config.local_retention_bytes_config, "retention.bytes",
         config.retention_bytes),
        ("local.retention.ms", config.local_retention_ms_config, "retention.ms",
         config.retention_ms),
    ):  # fmt: skip
        if local not in (-2, total):
            raise ConfigError(
                f"With remote.log.copy.disable=true, {key} ({local}) must equal {total_key} "
                f"({total}) or be -2, since no more segments are copied to remote storage.",
                key,
            )


def _check_turning_off(config: LogConfig, was_enabled: bool) -> None:
    """Kafka's validateTurningOffRemoteStorageWithDelete (KIP-950)."""
    if was_enabled and not config.remote_log_delete_on_disable:
        raise ConfigError(
            "Turning remote storage off would leave the topic's remote data behind. To keep "
            "the remote data readable but copy no more, set remote.storage.enable=true and "
            "remote.log.copy.disable=true; to turn remote storage off and delete the remote "
            "data, set remote.storage.enable=false and remote.log.delete.on.disable=true.",
            "remote.storage.enable",
        )
