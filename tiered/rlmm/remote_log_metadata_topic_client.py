"""What the topic-based RemoteLogMetadataManager needs of ``__remote_log_metadata``: the
part of Kafka's producer, consumer and admin client it uses, as a Protocol, because
tiered cannot import the broker's network code. The broker implements it with its own
ReplicaManager and inter-broker clients (``server.remote_log_metadata_topic``); tests
implement it over a list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from tiercel.tiered.rsm.remote_storage_manager import RemoteStorageError

__all__ = [
    "REMOTE_LOG_METADATA_TOPIC_NAME",
    "MetadataFetch",
    "MetadataTopicMismatchError",
    "RemoteLogMetadataTopicClient",
]

# Kafka's TopicBasedRemoteLogMetadataManagerConfig.REMOTE_LOG_METADATA_TOPIC_NAME.
REMOTE_LOG_METADATA_TOPIC_NAME: Final = "__remote_log_metadata"


class MetadataTopicMismatchError(RemoteStorageError):
    """``__remote_log_metadata`` exists with another partition count than configured:
    not retriable (Kafka's RLMM fails its initialization)."""


@dataclass(frozen=True, slots=True)
class MetadataFetch:
    """What one fetch of a metadata partition returned. Invariants: ``records`` are
    (offset, value) in increasing offset order, all below ``high_watermark``;
    ``next_offset`` is where the next fetch starts: after the last record, or the
    partition's log start when the fetch asked below it (retention deleted the head)."""

    records: list[tuple[int, bytes]]
    next_offset: int
    high_watermark: int


class RemoteLogMetadataTopicClient(Protocol):
    """Event-loop only. Failures raise `RemoteStorageError` (retriable: the caller backs
    off and tries again); a leader moving is retried inside, until cancelled."""

    @property
    def num_partitions(self) -> int:
        """The partition count ``__remote_log_metadata`` is created with."""

    async def ensure_topic(self) -> None:
        """Create the topic unless it exists and return once every partition has a
        leader; `MetadataTopicMismatchError` if it exists with another partition count
        (Kafka's RLMM refuses to start then: the partitioner would send events
        elsewhere)."""

    async def produce(self, metadata_partition: int, value: bytes) -> int:
        """Append one record (null key, ``value``) with acks=all; its offset."""

    async def fetch(self, metadata_partition: int, offset: int, max_wait_ms: int) -> MetadataFetch:
        """Records from ``offset`` up to the high watermark; waits up to ``max_wait_ms``
        while there are none."""

    async def close(self) -> None:
        """Release connections."""
