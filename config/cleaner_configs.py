"""Log cleaner definitions: Kafka's `CleanerConfig` (log.cleaner.* keys).

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import (
    LONG_MAX,
    ConfigDef,
    ConfigType,
    at_least,
    in_range,
)

_B = ConfigType.BOOLEAN
_I = ConfigType.INT
_L = ConfigType.LONG
_D = ConfigType.DOUBLE

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
CLEANER_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("log.cleaner.delete.retention.ms", _L, 86400000, at_least(0),
              "How long tombstones stay in a compacted log before the cleaner may drop them."),
    ConfigDef("log.cleaner.min.cleanable.ratio", _D, 0.5, in_range(0, 1),
              "Share of a log that must be uncompacted before the cleaner picks it."),
    ConfigDef("log.cleaner.min.compaction.lag.ms", _L, 0, at_least(0),
              "Youngest age at which a record may be compacted away."),
    ConfigDef("log.cleaner.max.compaction.lag.ms", _L, LONG_MAX, at_least(1),
              "Oldest age a record may reach before its log becomes eligible for compaction."),
    ConfigDef("log.cleaner.enable", _B, True, None,
              "Run the log cleaner, which compacts the topics with cleanup.policy=compact."),
    ConfigDef("log.cleaner.threads", _I, 1, at_least(0),
              "Threads that compact logs in the background."),
    ConfigDef("log.cleaner.backoff.ms", _L, 15000, at_least(0),
              "How long the cleaner sleeps when no log needs cleaning."),
    ConfigDef("log.cleaner.dedupe.buffer.size", _L, 134217728, None,
              "Memory for the key-to-offset maps of all cleaner threads together."),
)
# fmt: on
