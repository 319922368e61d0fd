"""Tiered storage definitions (KIP-405): Kafka's `RemoteLogManagerConfig` keys, with
Kafka 4's defaults, and the broker defaults of the local retention topic keys.

Keys that start with the two plugin prefixes (rsm.config. and rlmm.config. unless
remote.log.storage.manager.impl.prefix / remote.log.metadata.manager.impl.prefix say
otherwise) are not defined here: `remote_storage_props` passes them to the plugins.

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from tiercel.config.config_def import (
    LONG_MAX,
    ConfigDef,
    ConfigType,
    at_least,
    in_range,
    non_empty_string,
)

__all__ = [
    "REMOTE_LOG_MANAGER_CONFIGS",
    "RSM_CLASS_NAME",
    "RemoteStorageManagerClassName",
    "local_retention_problem",
]

_B = ConfigType.BOOLEAN
_S = ConfigType.STRING
_I = ConfigType.INT
_L = ConfigType.LONG
_D = ConfigType.DOUBLE

# Kafka names a Java class; Tiercel names one of its own RemoteStorageManagers or a Python
# class as module:Class (the entry-point notation). Only the shape is checked here: the
# RSM factory imports the class when the broker starts tiering.
_BUILT_IN_RSMS: Final = ("local", "s3")
_IDENTIFIER: Final = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED: Final = rf"{_IDENTIFIER}(\.{_IDENTIFIER})*"
_MODULE_CLASS: Final = re.compile(rf"{_DOTTED}:{_DOTTED}")


@dataclass(frozen=True, slots=True)
class RemoteStorageManagerClassName:
    """Accepts a built-in RemoteStorageManager's name or package.module:ClassName."""

    def __call__(self, value: object) -> None:
        if value in _BUILT_IN_RSMS:
            return
        if not isinstance(value, str) or not _MODULE_CLASS.fullmatch(value):
            raise ValueError(
                f"must be {' or '.join(_BUILT_IN_RSMS)}, or a class as package.module:ClassName"
            )

    def __str__(self) -> str:
        return f"{', '.join(_BUILT_IN_RSMS)} or package.module:ClassName"


RSM_CLASS_NAME: Final = RemoteStorageManagerClassName()

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
REMOTE_LOG_MANAGER_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("remote.log.storage.system.enable", _B, False, None,
              "Run the tiered storage services on this broker; topics may set "
              "remote.storage.enable only when it is true."),
    # Kafka has no default (a Java class must be named); Tiercel ships two.
    ConfigDef("remote.log.storage.manager.class.name", _S, "local", RSM_CLASS_NAME,
              "The RemoteStorageManager that holds remote segments: local (a directory), "
              "s3, or a Python class given as package.module:ClassName."),
    ConfigDef("remote.log.storage.manager.impl.prefix", _S, "rsm.config.", non_empty_string(),
              "Broker keys starting with this prefix are given, prefix removed, to the "
              "RemoteStorageManager."),
    ConfigDef("remote.log.metadata.manager.impl.prefix", _S, "rlmm.config.", non_empty_string(),
              "Broker keys starting with this prefix are given, prefix removed, to the "
              "RemoteLogMetadataManager."),
    ConfigDef("remote.log.index.file.cache.total.size.bytes", _L, 1073741824, at_least(1),
              "Local disk space for the indexes of remote segments fetched to serve reads."),
    ConfigDef("remote.log.manager.copier.thread.pool.size", _I, 10, at_least(1),
              "Threads that copy rolled segments to remote storage."),
    ConfigDef("remote.log.manager.expiration.thread.pool.size", _I, 10, at_least(1),
              "Threads that delete remote segments which retention no longer keeps."),
    ConfigDef("remote.log.manager.task.interval.ms", _L, 30000, at_least(1),
              "How often the remote log manager runs its copy and expiration tasks."),
    ConfigDef("remote.log.manager.task.retry.backoff.ms", _L, 500, at_least(1),
              "First wait before a failed remote log manager task is retried."),
    ConfigDef("remote.log.manager.task.retry.backoff.max.ms", _L, 30000, at_least(1),
              "Longest wait between retries; the wait doubles after each failure up to it."),
    ConfigDef("remote.log.manager.task.retry.jitter", _D, 0.2, in_range(0, 0.5),
              "Random spread of retry waits: 0.25 multiplies each wait by a factor in "
              "[0.75, 1.25)."),
    ConfigDef("remote.log.reader.threads", _I, 10, at_least(1),
              "Threads that read remote segments for fetches below the local log start."),
    ConfigDef("remote.log.reader.max.pending.tasks", _I, 100, at_least(1),
              "Remote reads that may wait for a reader thread; fetches beyond it get an error."),
    ConfigDef("remote.fetch.max.wait.ms", _I, 500, at_least(1),
              "Longest time a fetch that needs remote data waits for it before answering."),
    ConfigDef("remote.log.manager.copy.max.bytes.per.second", _L, LONG_MAX, at_least(1),
              "Bytes per second the broker may copy to remote storage, over all partitions."),
    ConfigDef("remote.log.manager.fetch.max.bytes.per.second", _L, LONG_MAX, at_least(1),
              "Bytes per second the broker may read from remote storage, over all partitions."),
    ConfigDef("log.local.retention.ms", _L, -2, at_least(-2),
              "How long tiered segments stay on local disk (-2: as long as log.retention.ms; "
              "-1: no limit); at most the total retention time."),
    ConfigDef("log.local.retention.bytes", _L, -2, at_least(-2),
              "Local size a tiered partition may keep (-2: as log.retention.bytes; "
              "-1: no limit); at most the total retention size."),
)
# fmt: on


def local_retention_problem(local: int, total: int, total_name: str) -> str | None:
    """Why a local retention (time or size) cannot go with a total one, if it cannot:
    Kafka's LogConfig.validateRemoteStorageRetentionTime / ...Size. -2 (use the total)
    always fits; with a limited total, the local one must be limited and no larger."""
    if total < 0 or local == -2:
        return None
    if local == -1:
        return f"must not be -1 (no limit) while {total_name} is {total}"
    if local > total:
        return f"must not be more than {total_name} ({total})"
    return None
