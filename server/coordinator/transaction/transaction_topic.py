"""Creating __transaction_state on first need, as Kafka does on the first
FindCoordinator for a transactional id: ``transaction.state.log.num.partitions``
partitions, ``transaction.state.log.replication.factor`` replicas (capped at the live
brokers), compacted, with ``transaction.state.log.min.isr`` and
``transaction.state.log.segment.bytes``.
"""

from __future__ import annotations

from tiercel.server.admin_manager import AdminManager
from tiercel.server.coordinator.transaction.transaction_config import (
    TRANSACTION_STATE_TOPIC_NAME,
    TransactionConfig,
)
from tiercel.server.internal_topic import ensure_internal_topic
from tiercel.server.metadata.metadata_cache import MetadataCache


async def ensure_transaction_topic(
    admin: AdminManager, cache: MetadataCache, config: TransactionConfig, timeout_s: float
) -> bool:
    """True once every partition has a leader, False if that takes longer than
    ``timeout_s``; raises the KafkaError of a failed creation."""
    return await ensure_internal_topic(
        admin,
        cache,
        TRANSACTION_STATE_TOPIC_NAME,
        config.transaction_state_log_num_partitions,
        config.transaction_state_log_replication_factor,
        config.transaction_topic_configs(),
        timeout_s,
    )
