"""GroupCoordinatorConfig: the broker settings the group coordinator reads, in one value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tiercel.config.broker_config import BrokerConfig, ConfigError

GROUP_METADATA_TOPIC_NAME: Final = "__consumer_offsets"
# Kafka's assignor class names, as group.consumer.assignors may give them.
_ASSIGNOR_NAMES: Final = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """Kafka's GroupConfig and OffsetConfig together. Immutable; any thread."""

    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104857600
    offsets_topic_compression_codec: int = 0
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offsets_load_buffer_size: int = 5242880
    offsets_commit_timeout_ms: int = 5000
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_max_size: int = 2**31 - 1
    group_initial_rebalance_delay_ms: int = 3000
    consumer_group_heartbeat_interval_ms: int = 5000
    consumer_group_session_timeout_ms: int = 45000
    consumer_group_max_size: int = 2**31 - 1
    consumer_group_assignors: tuple[str, ...] = ("uniform", "range")

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> GroupCoordinatorConfig:
        return cls(
            offsets_topic_num_partitions=config.offsets_topic_num_partitions,
            offsets_topic_replication_factor=config.offsets_topic_replication_factor,
            offsets_topic_segment_bytes=config.offsets_topic_segment_bytes,
            offsets_topic_compression_codec=config.offsets_topic_compression_codec,
            offsets_retention_ms=config.offsets_retention_minutes * 60 * 1000,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            offsets_load_buffer_size=config.offsets_load_buffer_size,
            offsets_commit_timeout_ms=config.offsets_commit_timeout_ms,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            group_min_session_timeout_ms=config.group_min_session_timeout_ms,
            group_max_session_timeout_ms=config.group_max_session_timeout_ms,
            group_max_size=config.group_max_size,
            group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            consumer_group_heartbeat_interval_ms=_heartbeat_interval(config),
            consumer_group_session_timeout_ms=config.group_consumer_session_timeout_ms,
            consumer_group_max_size=config.group_consumer_max_size,
            consumer_group_assignors=_assignors(config),
        )

    def offsets_topic_configs(self) -> dict[str, str]:
        """Kafka's overrides for __consumer_offsets: compacted, small segments, batches
        kept as the coordinator wrote them."""
        return {
            "cleanup.policy": "compact",
            "segment.bytes": str(self.offsets_topic_segment_bytes),
            "compression.type": "producer",
        }


def _heartbeat_interval(config: BrokerConfig) -> int:
    """Kafka requires the heartbeat interval below the session timeout."""
    interval = config.group_consumer_heartbeat_interval_ms
    if interval >= config.group_consumer_session_timeout_ms:
        raise ConfigError(
            "group.consumer.heartbeat.interval.ms must be less than "
            "group.consumer.session.timeout.ms",
            "group.consumer.heartbeat.interval.ms",
        )
    return interval


def _assignors(config: BrokerConfig) -> tuple[str, ...]:
    """The configured assignors by their short names, without repeats, default first."""
    names = tuple(dict.fromkeys(_ASSIGNOR_NAMES.get(a, a) for a in config.group_consumer_assignors))
    if not names:
        raise ConfigError(
            "group.consumer.assignors must name at least one assignor", "group.consumer.assignors"
        )
    return names
