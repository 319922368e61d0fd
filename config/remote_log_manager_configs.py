"""Tiered-storage definitions: Kafka's `RemoteLogManagerConfig` keys the RemoteLogManager
honours (KIP-405); `remote_log_manager_config` is their typed view.

Part of the broker registry `kafka_config.BROKER_CONFIGS`; the topic keys
(``remote.storage.enable``, ``local.retention.*``, ...) are in `topic_configs`.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import LONG_MAX, ConfigDef, ConfigType, at_least, in_range

__all__ = ["REMOTE_LOG_MANAGER_CONFIGS"]

_B = ConfigType.BOOLEAN
_I = ConfigType.INT
_L = ConfigType.LONG
_D = ConfigType.DOUBLE

# fmt: off
REMOTE_LOG_MANAGER_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("remote.log.storage.system.enable", _B, False, None,
              "Run the remote tier: topics with remote.storage.enable=true copy rolled "
              "segments to the RemoteStorageManager."),
    ConfigDef("remote.log.manager.task.interval.ms", _L, 30000, at_least(1),
              "How often each partition's copy and expiration tasks run."),
    ConfigDef("remote.log.manager.task.retry.backoff.ms", _L, 500, at_least(1),
              "First wait before retrying a failed remote operation."),
    ConfigDef("remote.log.manager.task.retry.backoff.max.ms", _L, 30000, at_least(1),
              "Longest wait between retries of a failed remote operation."),
    ConfigDef("remote.log.manager.task.retry.jitter", _D, 0.2, in_range(0, 0.5),
              "Random share added to or taken from each retry wait."),
    ConfigDef("remote.log.manager.copier.thread.pool.size", _I, 10, at_least(1),
              "Threads that copy segments to the remote tier."),
    ConfigDef("remote.log.manager.expiration.thread.pool.size", _I, 10, at_least(1),
              "Threads that delete expired segments from the remote tier."),
    ConfigDef("remote.log.manager.copy.max.bytes.per.second", _L, LONG_MAX, at_least(1),
              "Most bytes per second the broker copies to the remote tier."),
    ConfigDef("log.local.retention.ms", _L, -2, at_least(-2),
              "How long a tiered segment stays on local disk (-2: retention.ms)."),
    ConfigDef("log.local.retention.bytes", _L, -2, at_least(-2),
              "Local bytes a tiered partition keeps (-2: retention.bytes)."),
)
# fmt: on
