"""The topic-based RLMM's settings (Kafka's TopicBasedRemoteLogMetadataManagerConfig).

The broker passes the ``rlmm.config.``-prefixed properties with the prefix stripped, as
Kafka's RemoteLogManagerConfig does; `from_props` also accepts them still prefixed.
Kafka's producer and consumer settings of the RLMM come under
``remote.log.metadata.consumer.``: of those, the fetch wait and retry backoffs apply
here. The snapshot interval has no Kafka property: Kafka 3.x never wired its snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Final

__all__ = ["RLMM_CONFIG_PREFIX", "TopicBasedRemoteLogMetadataManagerConfig"]

RLMM_CONFIG_PREFIX: Final = "rlmm.config."

_PROPERTIES: Final = {
    "remote.log.metadata.topic.num.partitions": "topic_num_partitions",
    "remote.log.metadata.topic.replication.factor": "topic_replication_factor",
    "remote.log.metadata.topic.retention.ms": "topic_retention_ms",
    "remote.log.metadata.consume.wait.ms": "consume_wait_ms",
    "remote.log.metadata.initialization.retry.max.timeout.ms": (
        "initialization_retry_max_timeout_ms"
    ),
    "remote.log.metadata.initialization.retry.interval.ms": "initialization_retry_interval_ms",
    "remote.log.metadata.consumer.fetch.max.wait.ms": "fetch_max_wait_ms",
    "remote.log.metadata.consumer.retry.backoff.ms": "retry_backoff_ms",
    "remote.log.metadata.consumer.retry.backoff.max.ms": "retry_backoff_max_ms",
}


@dataclass(frozen=True, slots=True)
class TopicBasedRemoteLogMetadataManagerConfig:
    """Kafka's defaults. A value; any thread."""

    topic_num_partitions: int = 50
    topic_replication_factor: int = 3
    topic_retention_ms: int = -1
    consume_wait_ms: int = 120_000
    initialization_retry_max_timeout_ms: int = 120_000
    initialization_retry_interval_ms: int = 100
    fetch_max_wait_ms: int = 500
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    snapshot_interval_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.topic_num_partitions < 1:
            raise ValueError("remote.log.metadata.topic.num.partitions must be at least 1")
        if not 1 <= self.topic_replication_factor <= 0x7FFF:
            raise ValueError("remote.log.metadata.topic.replication.factor must be a short >= 1")
        for f in fields(self):
            if f.name not in ("topic_retention_ms",) and getattr(self, f.name) < 0:
                raise ValueError(f"{f.name} must not be negative")

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> TopicBasedRemoteLogMetadataManagerConfig:
        """Kafka's property names; others (RSM settings, the client prefixes' other
        keys) are ignored. ValueError for a value that is not an integer or out of
        range."""
        values: dict[str, int] = {}
        for key, raw in props.items():
            name = _PROPERTIES.get(key.removeprefix(RLMM_CONFIG_PREFIX))
            if name is None:
                continue
            try:
                values[name] = int(raw)
            except ValueError:
                raise ValueError(f"{key}={raw!r} is not an integer") from None
        return cls(**values)
