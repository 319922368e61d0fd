"""Whether a partition's log has a remote tier (Kafka's UnifiedLog.isRemoteLogEnabled,
KIP-405): the broker runs one (``remote.log.storage.system.enable``), the topic asks for
it (``remote.storage.enable``), and the topic is not an internal one, whose records the
brokers themselves read at start-up. Pure; any thread.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.log_config import LogConfig

__all__ = ["is_remote_log_enabled"]

# Kafka's Topic.isInternal.
_INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})


def is_remote_log_enabled(system_enable: bool, config: LogConfig, topic: str) -> bool:
    return system_enable and config.remote_storage_enable and topic not in _INTERNAL_TOPICS
