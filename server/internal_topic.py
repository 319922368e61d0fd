"""Creating an internal topic on first need, as Kafka's brokers create __consumer_offsets
(AutoTopicCreationManager) and the topic-based RLMM creates __remote_log_metadata:
the configured partition count, the configured replication factor (capped at the live
brokers when the caller asks, so that a single broker works out of the box), the topic's
config overrides.
"""

from __future__ import annotations

from collections.abc import Mapping

from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.admin_manager import AdminManager, NewTopic
from tiercel.server.metadata.metadata_cache import MetadataCache


def internal_topic_ready(cache: MetadataCache, name: str) -> bool:
    topic = cache.topic(name)
    return topic is not None and topic.has_leaders()


async def ensure_internal_topic(
    admin: AdminManager,
    cache: MetadataCache,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
    timeout_s: float,
    cap_at_live_brokers: bool = True,
) -> bool:
    """Create the topic unless it exists; True once every partition has a leader,
    False if that takes longer than ``timeout_s``. Raises the KafkaError of a failed
    creation (a concurrent creation is not one), such as INVALID_REPLICATION_FACTOR
    while fewer brokers than ``replication_factor`` are alive and the factor is not
    capped."""
    if internal_topic_ready(cache, name):
        return True
    if cache.topic(name) is None:
        factor = replication_factor
        if cap_at_live_brokers:
            factor = max(min(factor, len(cache.alive_broker_ids())), 1)
        topic = NewTopic(name, num_partitions, factor, configs=configs)
        try:
            await admin.create_topic(name, admin.plan_topic(topic))
        except KafkaError as e:
            if e.error_code != ErrorCode.topic_already_exists:
                raise
    return await cache.wait_until(lambda c: internal_topic_ready(c, name), timeout_s)
