"""The metadata log's settings (Kafka's ``MetadataLogConfig``), already parsed: the broker
maps its ``metadata.log.*`` and ``metadata.max.retention.*`` keys onto this value.

    metadata.log.segment.bytes      1 GiB   segment size (at least 8 MiB, the largest batch)
    metadata.log.segment.ms         7 days  segment age before a roll
    metadata.max.retention.bytes    100 MiB log and snapshots beyond this lose old snapshots
    metadata.max.retention.ms       7 days  snapshots older than this go (never the latest)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_BATCH_SIZE_BYTES", "MetadataLogConfig"]

# KafkaRaftClient.MAX_BATCH_SIZE_BYTES and MAX_FETCH_SIZE_BYTES.
MAX_BATCH_SIZE_BYTES: Final = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class MetadataLogConfig:
    """Invariant: segments hold at least one batch of the largest size (Kafka refuses
    metadata.log.segment.bytes below metadata.log.segment.min.bytes). A value."""

    log_segment_bytes: int = 1024 * 1024 * 1024
    log_segment_min_bytes: int = MAX_BATCH_SIZE_BYTES
    log_segment_millis: int = 7 * 24 * 3600 * 1000
    retention_max_bytes: int = 100 * 1024 * 1024
    retention_millis: int = 7 * 24 * 3600 * 1000
    max_batch_size_in_bytes: int = MAX_BATCH_SIZE_BYTES
    max_fetch_size_in_bytes: int = MAX_BATCH_SIZE_BYTES
    file_delete_delay_ms: int = 60000

    def __post_init__(self) -> None:
        if self.log_segment_bytes < self.log_segment_min_bytes:
            raise ValueError(
                f"Cannot set metadata.log.segment.bytes below {self.log_segment_min_bytes}: "
                f"{self.log_segment_bytes}"
            )
