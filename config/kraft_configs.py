"""KRaft definitions: Kafka's `KRaftConfigs` and the controller quorum's `QuorumConfig`.

A node runs in KRaft mode when `process.roles` names a role (`broker`, `controller`, or
both); without it Tiercel keeps the embedded metadata store (or ZooKeeper until KRaft
replaces it). Defaults are Kafka 4.0's. The checks that relate these keys to the
listeners and to each other are in `kraft_validation`. The quorum's timeouts, the
metadata log's retention and snapshots and the broker heartbeats join as the KRaft
runtime that reads them does: a key nothing reads is never accepted.

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigType, list_of, one_of

_S = ConfigType.STRING
_LIST = ConfigType.LIST

PROCESS_ROLES: Final = ("broker", "controller")

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
KRAFT_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("process.roles", _LIST, (), list_of(one_of(*PROCESS_ROLES)),
              "The roles this node plays in a KRaft cluster: broker, controller, or both; "
              "empty runs without KRaft (the embedded metadata store)."),
    ConfigDef("controller.listener.names", _LIST, (), None,
              "Names of the listeners the controllers serve on; the first is the one "
              "brokers and other controllers use to reach them. Required in KRaft mode."),
    ConfigDef("controller.quorum.voters", _LIST, (), None,
              "The static controller quorum: id@host:port of every voter."),
    ConfigDef("metadata.log.dir", _S, None, None,
              "Directory of the metadata log (__cluster_metadata-0); when unset, the first "
              "of log.dirs."),
)
# fmt: on
