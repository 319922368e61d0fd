"""ZooKeeper client definitions: Kafka's `ZkConfigs`.

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigType

_S = ConfigType.STRING
_I = ConfigType.INT

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
ZK_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("zookeeper.connect", _S, None, None,
              "ZooKeeper connection string host:port[,host:port...][/chroot]; when unset, "
              "cluster metadata stays in a local file-backed store."),
    ConfigDef("zookeeper.session.timeout.ms", _I, 6000, None,
              "ZooKeeper session timeout; when the session expires the broker is deregistered "
              "(Kafka's default before 2.5, KIP-537)."),
    ConfigDef("zookeeper.connection.timeout.ms", _I, None, None,
              "How long to wait for a ZooKeeper connection; when unset, "
              "zookeeper.session.timeout.ms is used."),
)
# fmt: on
