"""Replication definitions: Kafka's `ReplicationConfigs` (replica fetching, ISR, leader
election and balancing, the inter-broker listener).

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigType, at_least, one_of

_B = ConfigType.BOOLEAN
_S = ConfigType.STRING
_I = ConfigType.INT
_L = ConfigType.LONG

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
REPLICATION_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("default.replication.factor", _I, 1, None,
              "Replication factor of topics created without an explicit one."),
    ConfigDef("unclean.leader.election.enable", _B, False, None,
              "Let a replica outside the ISR become leader as a last resort, "
              "at the risk of losing data."),
    ConfigDef("unclean.leader.election.interval.ms", _L, 300000, at_least(1),
              "How often a KRaft controller checks for leaderless partitions whose topic "
              "allows unclean leader election, and elects one of their live replicas."),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", _L, 5000, None,
              "How often high watermarks are written to the replication-offset checkpoint."),
    ConfigDef("replica.lag.time.max.ms", _L, 30000, None,
              "A follower that has not caught up within this time is removed from the ISR."),
    ConfigDef("replica.fetch.max.bytes", _I, 1048576, at_least(0),
              "Bytes a follower asks for per partition and fetch; a larger first batch "
              "is still sent."),
    ConfigDef("replica.fetch.wait.max.ms", _I, 500, None,
              "Longest a follower's fetch waits for data; keep it below replica.lag.time.max.ms."),
    ConfigDef("replica.fetch.min.bytes", _I, 1, at_least(1),
              "Bytes a follower's fetch waits for, up to replica.fetch.wait.max.ms."),
    ConfigDef("replica.fetch.response.max.bytes", _I, 10485760, at_least(0),
              "Bytes a follower asks for per fetch over all partitions; a larger first "
              "batch is still sent."),
    ConfigDef("replica.fetch.backoff.ms", _I, 1000, at_least(0),
              "How long a follower waits before fetching a partition again after an error."),
    ConfigDef("replica.socket.receive.buffer.bytes", _I, 65536, at_least(-1),
              "SO_RCVBUF of a follower's connections to its leaders; -1 keeps the operating "
              "system default."),
    ConfigDef("replica.socket.timeout.ms", _I, 30000, at_least(1),
              "How long a follower waits for its leader to answer a request."),
    ConfigDef("inter.broker.listener.name", _S, None, None,
              "Listener brokers use to reach each other (replica fetching); when unset, "
              "the listener named after security.inter.broker.protocol if that is set, "
              "else the first listener."),
    ConfigDef("security.inter.broker.protocol", _S, "PLAINTEXT",
              one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
              "Security protocol between brokers; setting it names the inter-broker "
              "listener after it. Only one of this and inter.broker.listener.name."),
    ConfigDef("auto.leader.rebalance.enable", _B, True, None,
              "Periodically move leadership back to each partition's preferred replica."),
    ConfigDef("leader.imbalance.check.interval.seconds", _L, 300, at_least(1),
              "How often the controller checks whether leadership needs rebalancing."),
    ConfigDef("leader.imbalance.per.broker.percentage", _I, 10, at_least(0),
              "Share of a broker's preferred partitions led elsewhere, in percent, above "
              "which the controller moves leadership back."),
)
# fmt: on
