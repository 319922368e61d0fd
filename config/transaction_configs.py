"""Transaction and producer-state definitions: Kafka's `TransactionLogConfig` and
`TransactionStateManagerConfig`.

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigType, at_least

_I = ConfigType.INT

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
TRANSACTION_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("transactional.id.expiration.ms", _I, 604800000, at_least(1),
              "How long an idle transactional id is kept before it expires; Tiercel has no "
              "transactions yet and supports only the default.",
              unsupported="transactions are not implemented"),
    ConfigDef("producer.id.expiration.ms", _I, 86400000, at_least(1),
              "How long the state of an idle idempotent producer is kept."),
    ConfigDef("producer.id.expiration.check.interval.ms", _I, 600000, at_least(1),
              "How often producer state older than producer.id.expiration.ms is removed."),
)
# fmt: on
