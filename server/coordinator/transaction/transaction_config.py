"""TransactionConfig: the broker settings the transaction coordinator reads, in one value
(Kafka's TransactionConfig, TransactionLogConfig and TransactionStateManagerConfig)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tiercel.config.broker_config import BrokerConfig

TRANSACTION_STATE_TOPIC_NAME: Final = "__transaction_state"


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """Immutable; any thread."""

    transactional_id_expiration_ms: int = 604800000
    transaction_max_timeout_ms: int = 900000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104857600
    transaction_state_log_load_buffer_size: int = 5242880
    abort_timed_out_transactions_interval_ms: int = 10000
    remove_expired_transactional_ids_interval_ms: int = 3600000
    request_timeout_ms: int = 30000
    """How long a write to __transaction_state waits for the ISR (Kafka's
    TransactionStateManager uses the transaction config's request timeout), and how long
    a marker request may take."""
    inter_broker_listener_name: str = "PLAINTEXT"

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> TransactionConfig:
        return cls(
            transactional_id_expiration_ms=config.transactional_id_expiration_ms,
            transaction_max_timeout_ms=config.transaction_max_timeout_ms,
            transaction_state_log_num_partitions=config.transaction_state_log_num_partitions,
            transaction_state_log_replication_factor=config.transaction_state_log_replication_factor,
            transaction_state_log_min_isr=config.transaction_state_log_min_isr,
            transaction_state_log_segment_bytes=config.transaction_state_log_segment_bytes,
            transaction_state_log_load_buffer_size=config.transaction_state_log_load_buffer_size,
            abort_timed_out_transactions_interval_ms=(
                config.transaction_abort_timed_out_transaction_cleanup_interval_ms
            ),
            remove_expired_transactional_ids_interval_ms=(
                config.transaction_remove_expired_transaction_cleanup_interval_ms
            ),
            inter_broker_listener_name=config.inter_broker_listener_name,
        )

    def transaction_topic_configs(self) -> dict[str, str]:
        """Kafka's overrides for __transaction_state (TransactionLog /
        TransactionStateManager.transactionTopicConfigs): compacted, uncompressed,
        min.insync.replicas from transaction.state.log.min.isr, no unclean election."""
        return {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "segment.bytes": str(self.transaction_state_log_segment_bytes),
            "min.insync.replicas": str(self.transaction_state_log_min_isr),
            "unclean.leader.election.enable": "false",
        }
