"""The RemoteLogManager's typed settings (Kafka's RemoteLogManagerConfig, KIP-405)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import LONG_MAX
from tiercel.config.remote_log_manager_configs import REMOTE_LOG_MANAGER_CONFIGS

__all__ = ["RemoteLogManagerConfig"]


@dataclass(frozen=True, slots=True)
class RemoteLogManagerConfig:
    """The RemoteLogManager's settings (Kafka's RemoteLogManagerConfig). Any thread."""

    remote_log_storage_system_enable: bool = False
    remote_log_manager_task_interval_ms: int = 30000
    remote_log_manager_task_retry_backoff_ms: int = 500
    remote_log_manager_task_retry_backoff_max_ms: int = 30000
    remote_log_manager_task_retry_jitter: float = 0.2
    remote_log_manager_copier_thread_pool_size: int = 10
    remote_log_manager_expiration_thread_pool_size: int = 10
    remote_log_manager_copy_max_bytes_per_second: int = LONG_MAX

    @classmethod
    def from_broker(cls, broker: BrokerConfig) -> RemoteLogManagerConfig:
        values: dict[str, Any] = {
            d.name.replace(".", "_"): broker.get(d.name)
            for d in REMOTE_LOG_MANAGER_CONFIGS
            if d.name.startswith("remote.")
        }
        return cls(**values)
