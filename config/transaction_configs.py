"""Transaction and producer-state definitions: Kafka's `TransactionLogConfig` and
`TransactionStateManagerConfig`.

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigType, at_least

_I = ConfigType.INT
_B = ConfigType.BOOLEAN
_H = ConfigType.SHORT

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
TRANSACTION_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("transactional.id.expiration.ms", _I, 604800000, at_least(1),
              "How long the transaction coordinator keeps a transactional id that has no "
              "transaction open and no update."),
    ConfigDef("transaction.max.timeout.ms", _I, 900000, at_least(1),
              "Largest transaction.timeout.ms a producer may ask for "
              "(INVALID_TRANSACTION_TIMEOUT beyond it)."),
    ConfigDef("transaction.state.log.num.partitions", _I, 50, at_least(1),
              "Partition count of __transaction_state; fixed once the topic exists."),
    ConfigDef("transaction.state.log.replication.factor", _H, 3, at_least(1),
              "Replication factor of __transaction_state, capped at the number of live "
              "brokers when the topic is created."),
    ConfigDef("transaction.state.log.min.isr", _I, 2, at_least(1),
              "min.insync.replicas of __transaction_state."),
    ConfigDef("transaction.state.log.segment.bytes", _I, 104857600, at_least(1),
              "Segment size of __transaction_state; small segments compact and load faster."),
    ConfigDef("transaction.state.log.load.buffer.size", _I, 5242880, at_least(1),
              "Bytes read at a time when a coordinator loads a __transaction_state partition."),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", _I, 10000,
              at_least(1), "How often transactions past their timeout are looked for and "
              "aborted."),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", _I, 3600000,
              at_least(1), "How often transactional ids past transactional.id.expiration.ms "
              "are removed."),
    ConfigDef("transaction.partition.verification.enable", _B, True, None,
              "Partition leaders ask the transaction coordinator to confirm a partition "
              "is in the producer's transaction before its first transactional write "
              "there (KIP-890), so a late write cannot leave a hanging transaction."),
    ConfigDef("producer.id.expiration.ms", _I, 86400000, at_least(1),
              "How long the state of an idle idempotent producer is kept."),
    ConfigDef("producer.id.expiration.check.interval.ms", _I, 600000, at_least(1),
              "How often producer state older than producer.id.expiration.ms is removed."),
)
# fmt: on
