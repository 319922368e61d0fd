"""Creating __consumer_offsets on first need, as Kafka does on the first FindCoordinator
(or a Metadata request naming it): ``offsets.topic.num.partitions`` partitions,
``offsets.topic.replication.factor`` replicas (capped at the live brokers, so that a
single broker works out of the box), compacted, ``offsets.topic.segment.bytes`` segments.
"""

from __future__ import annotations

from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.admin_manager import AdminManager, NewTopic
from tiercel.server.coordinator.group.group_config import (
    GROUP_METADATA_TOPIC_NAME,
    GroupCoordinatorConfig,
)
from tiercel.server.metadata.metadata_cache import MetadataCache


def offsets_topic_ready(cache: MetadataCache) -> bool:
    topic = cache.topic(GROUP_METADATA_TOPIC_NAME)
    return topic is not None and topic.has_leaders()


async def ensure_offsets_topic(
    admin: AdminManager,
    cache: MetadataCache,
    config: GroupCoordinatorConfig,
    timeout_s: float,
) -> bool:
    """Create the topic unless it exists; True once every partition has a leader,
    False if that takes longer than ``timeout_s``. Raises the KafkaError of a failed
    creation (a concurrent creation is not one)."""
    if offsets_topic_ready(cache):
        return True
    if cache.topic(GROUP_METADATA_TOPIC_NAME) is None:
        factor = min(config.offsets_topic_replication_factor, len(cache.alive_broker_ids()))
        topic = NewTopic(
            GROUP_METADATA_TOPIC_NAME,
            config.offsets_topic_num_partitions,
            max(factor, 1),
            configs=config.offsets_topic_configs(),
        )
        try:
            await admin.create_topic(GROUP_METADATA_TOPIC_NAME, admin.plan_topic(topic))
        except KafkaError as e:
            if e.error_code != ErrorCode.topic_already_exists:
                raise
    return await cache.wait_until(offsets_topic_ready, timeout_s)
