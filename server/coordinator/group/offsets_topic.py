"""Creating __consumer_offsets on first need, as Kafka does on the first FindCoordinator
(or a Metadata request naming it): ``offsets.topic.num.partitions`` partitions,
``offsets.topic.replication.factor`` replicas (capped at the live brokers, so that a
single broker works out of the box), compacted, ``offsets.topic.segment.bytes`` segments.
"""

from __future__ import annotations

from tiercel.server.admin_manager import AdminManager
from tiercel.server.coordinator.group.group_config import (
    GROUP_METADATA_TOPIC_NAME,
    GroupCoordinatorConfig,
)
from tiercel.server.internal_topic import ensure_internal_topic, internal_topic_ready
from tiercel.server.metadata.metadata_cache import MetadataCache


def offsets_topic_ready(cache: MetadataCache) -> bool:
    return internal_topic_ready(cache, GROUP_METADATA_TOPIC_NAME)


async def ensure_offsets_topic(
    admin: AdminManager,
    cache: MetadataCache,
    config: GroupCoordinatorConfig,
    timeout_s: float,
) -> bool:
    """Create the topic unless it exists; True once every partition has a leader,
    False if that takes longer than ``timeout_s``. Raises the KafkaError of a failed
    creation (a concurrent creation is not one)."""
    return await ensure_internal_topic(
        admin,
        cache,
        GROUP_METADATA_TOPIC_NAME,
        config.offsets_topic_num_partitions,
        config.offsets_topic_replication_factor,
        config.offsets_topic_configs(),
        timeout_s,
    )
