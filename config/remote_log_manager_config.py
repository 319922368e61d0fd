"""RemoteLogManagerConfig: the tiered storage settings of a broker as one typed value,
what the RemoteLogManager and its plugins are built from (Kafka has the same class).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.remote_log_manager_configs import REMOTE_LOG_MANAGER_CONFIGS
from tiercel.config.remote_storage_props import TopicBasedRemoteLogMetadataManagerConfig

__all__ = ["RemoteLogManagerConfig"]


@dataclass(frozen=True, slots=True)
class RemoteLogManagerConfig:
    """One field per key of REMOTE_LOG_MANAGER_CONFIGS (the key with '.' replaced by '_'),
    plus the plugin keys, prefix removed.

    Invariant: every value passed its key's check when the BrokerConfig was built, so the
    plugin maps are what the plugins get and `remote_log_metadata_manager_config()` cannot
    fail. Immutable; any thread.
    """

    remote_log_storage_system_enable: bool
    remote_log_storage_manager_class_name: str
    remote_log_storage_manager_impl_prefix: str
    remote_log_metadata_manager_impl_prefix: str
    remote_log_index_file_cache_total_size_bytes: int
    remote_log_manager_copier_thread_pool_size: int
    remote_log_manager_expiration_thread_pool_size: int
    remote_log_manager_task_interval_ms: int
    remote_log_manager_task_retry_backoff_ms: int
    remote_log_manager_task_retry_backoff_max_ms: int
    remote_log_manager_task_retry_jitter: float
    remote_log_reader_threads: int
    remote_log_reader_max_pending_tasks: int
    remote_fetch_max_wait_ms: int
    remote_log_manager_copy_max_bytes_per_second: int
    remote_log_manager_fetch_max_bytes_per_second: int
    log_local_retention_ms: int
    log_local_retention_bytes: int
    remote_storage_manager_props: Mapping[str, str]
    remote_log_metadata_manager_props: Mapping[str, str]

    @classmethod
    def from_broker(cls, broker: BrokerConfig) -> RemoteLogManagerConfig:
        values: dict[str, Any] = {
            d.name.replace(".", "_"): broker.get(d.name) for d in REMOTE_LOG_MANAGER_CONFIGS
        }
        return cls(
            **values,
            remote_storage_manager_props=broker.remote_storage_manager_props(),
            remote_log_metadata_manager_props=broker.remote_log_metadata_manager_props(),
        )

    def remote_log_metadata_manager_config(self) -> TopicBasedRemoteLogMetadataManagerConfig:
        """The metadata manager's typed settings, from its prefixed keys."""
        return TopicBasedRemoteLogMetadataManagerConfig.from_props(
            self.remote_log_metadata_manager_props, self.remote_log_metadata_manager_impl_prefix
        )
