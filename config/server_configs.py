"""Core server definitions: Kafka's `ServerConfigs` (identity, request limits, topic
deletion, broker-wide compression, controlled shutdown).

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigType, at_least
from tiercel.config.topic_configs import COMPRESSION_TYPE

_B = ConfigType.BOOLEAN
_S = ConfigType.STRING
_I = ConfigType.INT
_L = ConfigType.LONG

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
SERVER_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("node.id", _I, 1, at_least(0),
              "Identifier of this broker, unique within its cluster.", aliases=("broker.id",)),
    ConfigDef("cluster.id", _S, None, None,
              "Identifier of the cluster; when unset the broker generates one on first start."),
    ConfigDef("message.max.bytes", _I, 1048588, at_least(0),
              "Largest record batch (after compression) the broker accepts; "
              "topics override it with max.message.bytes."),
    ConfigDef("delete.topic.enable", _B, True, None,
              "Allow topics to be deleted with the DeleteTopics API."),
    ConfigDef("compression.type", _S, "producer", COMPRESSION_TYPE,
              "Codec of stored batches; producer keeps whatever codec the producer used."),
    ConfigDef("controlled.shutdown.enable", _B, True, None,
              "Move partition leadership away before the broker shuts down."),
)
# fmt: on
