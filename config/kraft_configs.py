"""KRaft definitions: Kafka's `KRaftConfigs` and the controller quorum's `QuorumConfig`.

A node runs in KRaft mode when `process.roles` names a role (`broker`, `controller`, or
both); without it Tiercel runs a single node on the embedded metadata store. Defaults
are Kafka 4.0's. The checks that relate these keys to the listeners and to each other
are in `kraft_validation`.

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import ConfigDef, ConfigType, at_least, list_of, one_of

_S = ConfigType.STRING
_I = ConfigType.INT
_L = ConfigType.LONG
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
    ConfigDef("controller.quorum.bootstrap.servers", _LIST, (), None,
              "host:port of controllers to find the quorum through (KIP-853): the voters "
              "then come from the metadata log, as `tiercel storage format "
              "--standalone` or `--initial-controllers` wrote them. When "
              "controller.quorum.voters is set too, its static voters win."),
    ConfigDef("controller.quorum.election.timeout.ms", _I, 1000, at_least(0),
              "How long a voter waits without hearing from a leader before it starts an "
              "election."),
    ConfigDef("controller.quorum.fetch.timeout.ms", _I, 2000, at_least(0),
              "How long a follower waits without a successful fetch from the leader before "
              "it looks for a new one."),
    ConfigDef("controller.quorum.election.backoff.max.ms", _I, 1000, at_least(0),
              "Longest random backoff before a voter starts another election."),
    ConfigDef("controller.quorum.append.linger.ms", _I, 25, at_least(0),
              "How long the quorum leader gathers appends into one batch before writing it."),
    ConfigDef("controller.quorum.request.timeout.ms", _I, 2000, at_least(0),
              "How long a quorum request waits for its answer."),
    ConfigDef("controller.quorum.retry.backoff.ms", _I, 20, at_least(0),
              "Pause before a failed quorum request is sent again."),
    ConfigDef("metadata.log.dir", _S, None, None,
              "Directory of the metadata log (__cluster_metadata-0); when unset, the first "
              "of log.dirs."),
    ConfigDef("metadata.log.segment.bytes", _I, 1073741824, at_least(12),
              "Largest segment of the metadata log."),
    ConfigDef("metadata.log.segment.min.bytes", _I, 8388608, at_least(12),
              "Smallest metadata.log.segment.bytes allowed; lowered for tests only (Kafka's "
              "internal KRaftConfigs key: a segment below the largest batch, 8 MiB, may "
              "not take a batch of metadata records)."),
    ConfigDef("metadata.log.segment.ms", _L, 604800000, at_least(1),
              "Age after which the metadata log rolls a new segment."),
    ConfigDef("metadata.max.retention.bytes", _L, 104857600, None,
              "Size of metadata log and snapshots above which the oldest segments and "
              "snapshots a newer snapshot covers are deleted; -1 for no limit."),
    ConfigDef("metadata.max.retention.ms", _L, 604800000, None,
              "Age after which metadata log segments and snapshots a newer snapshot covers "
              "are deleted; -1 for no limit."),
    ConfigDef("metadata.log.max.record.bytes.between.snapshots", _L, 20971520, at_least(1),
              "Bytes of new metadata records after which a snapshot is written."),
    ConfigDef("metadata.log.max.snapshot.interval.ms", _L, 3600000, at_least(0),
              "Longest time between snapshots while there are new metadata records; "
              "0 disables the time-based trigger."),
    ConfigDef("metadata.max.idle.interval.ms", _I, 500, at_least(0),
              "How often the active controller writes a no-op record so that every node "
              "sees the metadata log advance; 0 disables it."),
    ConfigDef("broker.heartbeat.interval.ms", _I, 2000, at_least(1),
              "Time between a broker's heartbeats to the active controller."),
    ConfigDef("broker.session.timeout.ms", _I, 9000, at_least(1),
              "How long a broker stays registered without a heartbeat before the "
              "controller fences it and moves its leaderships."),
    ConfigDef("initial.broker.registration.timeout.ms", _I, 60000, at_least(1),
              "How long a starting broker keeps trying to register before it exits."),
)
# fmt: on
