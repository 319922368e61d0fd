"""Log definitions: Kafka's `ServerLogConfigs`, the broker-wide defaults of topic configs
(log.* keys) and the broker's own log settings (log dirs, recovery, flushing, topic
auto-creation).

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
    non_empty_distinct,
)
from tiercel.config.topic_configs import CLEANUP_POLICY, PREALLOCATE_UNSUPPORTED, TIMESTAMP_TYPE

_B = ConfigType.BOOLEAN
_S = ConfigType.STRING
_I = ConfigType.INT
_L = ConfigType.LONG
_LIST = ConfigType.LIST

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
SERVER_LOG_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("num.partitions", _I, 1, at_least(1),
              "Partition count of topics created without an explicit count."),
    # KIP-578's cluster-wide limit. The KIP's default is no limit; Tiercel's bounds what
    # one request can make the brokers allocate (Kafka's KRaft controller refuses more
    # than 10000 records in one operation, QuorumController.MAX_RECORDS_PER_USER_OP).
    ConfigDef("max.partitions", _I, 10000, at_least(1),
              "Most partitions the cluster may have, internal topics included; "
              "CreateTopics and CreatePartitions beyond it get POLICY_VIOLATION."),
    ConfigDef("auto.create.topics.enable", _B, True, None,
              "Create a missing topic when a client asks for its metadata."),
    ConfigDef("min.insync.replicas", _I, 1, at_least(1),
              "With acks=all, the fewest in-sync replicas that must have a write "
              "before it succeeds."),
    ConfigDef("log.dirs", _LIST, ("./data",), non_empty_distinct(),
              "Comma-separated directories that hold the partition logs.", aliases=("log.dir",)),
    ConfigDef("num.recovery.threads.per.data.dir", _I, 1, at_least(1),
              "Threads per log directory that recover logs at startup and flush at shutdown."),
    ConfigDef("log.segment.bytes", _I, 1073741824, at_least(14),
              "Size at which a log segment is closed and a new one started."),
    ConfigDef("log.roll.ms", _L, None, None,
              "Age in ms after which a new segment is rolled; when unset, log.roll.hours is used."),
    ConfigDef("log.roll.hours", _I, 168, at_least(1),
              "Age in hours after which a new segment is rolled; log.roll.ms comes first."),
    ConfigDef("log.roll.jitter.ms", _L, None, None,
              "Largest random time in ms taken off the roll age; when unset, "
              "log.roll.jitter.hours is used."),
    ConfigDef("log.roll.jitter.hours", _I, 0, at_least(0),
              "Largest random time in hours taken off the roll age; "
              "log.roll.jitter.ms comes first."),
    ConfigDef("log.retention.ms", _L, None, None,
              "Milliseconds a segment is kept before deletion (-1: no limit); when unset, "
              "log.retention.minutes is used."),
    ConfigDef("log.retention.minutes", _I, None, None,
              "Minutes a segment is kept before deletion; when unset, "
              "log.retention.hours is used."),
    ConfigDef("log.retention.hours", _I, 168, None,
              "Hours a segment is kept before deletion; log.retention.ms and "
              "log.retention.minutes come first."),
    ConfigDef("log.retention.bytes", _L, -1, None,
              "Size a partition may reach before its oldest segments are deleted (-1: no limit)."),
    ConfigDef("log.retention.check.interval.ms", _L, 300000, at_least(1),
              "How often the broker looks for segments that retention allows it to delete."),
    ConfigDef("log.cleanup.policy", _LIST, ("delete",), CLEANUP_POLICY,
              "What happens to old segments: delete, compact (by key), or both."),
    ConfigDef("log.index.interval.bytes", _I, 4096, at_least(0),
              "Bytes of log between two entries of the offset index."),
    ConfigDef("log.index.size.max.bytes", _I, 10485760, at_least(4),
              "Largest size of an offset or time index; a full index rolls the segment."),
    ConfigDef("log.segment.delete.delay.ms", _L, 60000, at_least(0),
              "Delay between marking a segment deleted and removing its files."),
    ConfigDef("log.preallocate", _B, False, None,
              "Preallocate segment files at their full size when they are created; "
              "Tiercel supports only false.", unsupported=PREALLOCATE_UNSUPPORTED),
    ConfigDef("log.message.timestamp.type", _S, "CreateTime", TIMESTAMP_TYPE,
              "Record timestamps are the producer's (CreateTime) or the broker's append time "
              "(LogAppendTime)."),
    ConfigDef("log.message.timestamp.before.max.ms", _L, LONG_MAX, at_least(0),
              "With CreateTime, how far a record timestamp may lie before the broker's clock."),
    # Kafka 4.0 lowered this default from Long.MAX to one hour.
    ConfigDef("log.message.timestamp.after.max.ms", _L, 3600000, at_least(0),
              "With CreateTime, how far a record timestamp may lie after the broker's clock."),
    ConfigDef("log.flush.interval.messages", _L, LONG_MAX, at_least(1),
              "Records appended to a partition between two forced flushes to disk."),
    ConfigDef("log.flush.interval.ms", _L, None, None,
              "Longest time appended records stay unflushed; when unset, "
              "log.flush.scheduler.interval.ms is used."),
    ConfigDef("log.flush.scheduler.interval.ms", _L, LONG_MAX, None,
              "How often the flusher checks whether a log needs flushing."),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", _I, 60000, at_least(0),
              "How often each log directory's recovery-point checkpoint is written."),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", _I, 60000, at_least(0),
              "How often each log directory's log-start-offset checkpoint is written."),
)
# fmt: on
