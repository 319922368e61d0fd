"""Topic-level config definitions: Kafka's `TopicConfig` keys with `LogConfig`'s defaults
and checks, and how a topic key's default follows from the broker's synonyms.

Each topic key names its broker synonyms (`ServerTopicConfigSynonyms`), in Kafka's order
of precedence; the broker keys themselves are in `server_log_configs` and its siblings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from tiercel.config.config_def import (
    LONG_MAX,
    ConfigDef,
    ConfigType,
    at_least,
    in_range,
    list_of,
    one_of,
)

__all__ = [
    "CLEANUP_POLICY",
    "COMPRESSION_TYPE",
    "PREALLOCATE_UNSUPPORTED",
    "TIMESTAMP_TYPE",
    "TOPIC_CONFIGS",
    "resolve_topic_default",
]

_B = ConfigType.BOOLEAN
_S = ConfigType.STRING
_I = ConfigType.INT
_L = ConfigType.LONG
_D = ConfigType.DOUBLE
_LIST = ConfigType.LIST

_HOUR_MS: Final = 3_600_000
_WEEK_MS: Final = 168 * _HOUR_MS
# Validators shared by topic keys and their broker synonyms.
COMPRESSION_TYPE: Final = one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPE: Final = one_of("CreateTime", "LogAppendTime")
CLEANUP_POLICY: Final = list_of(one_of("compact", "delete"))
# Kafka preallocates a segment to segment.bytes and trims it on roll; Tiercel's appends and
# recovery assume a segment file ends at its last batch.
PREALLOCATE_UNSUPPORTED: Final = "segment files grow as records are appended"

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
TOPIC_CONFIGS: Final[Mapping[str, ConfigDef]] = {d.name: d for d in (
    ConfigDef("cleanup.policy", _LIST, ("delete",), CLEANUP_POLICY,
              "Old segments are deleted, compacted to the latest record per key, or both.",
              ("log.cleanup.policy",)),
    ConfigDef("compression.type", _S, "producer", COMPRESSION_TYPE,
              "Codec of stored batches; producer keeps the codec the producer used.",
              ("compression.type",)),
    ConfigDef("delete.retention.ms", _L, 86400000, at_least(0),
              "How long tombstones are kept in a compacted topic for readers to see them.",
              ("log.cleaner.delete.retention.ms",)),
    ConfigDef("file.delete.delay.ms", _L, 60000, at_least(0),
              "Delay between marking a segment deleted and removing its files.",
              ("log.segment.delete.delay.ms",)),
    ConfigDef("flush.messages", _L, LONG_MAX, at_least(1),
              "Records appended between two forced flushes of the partition to disk.",
              ("log.flush.interval.messages",)),
    ConfigDef("flush.ms", _L, LONG_MAX, at_least(0),
              "Longest time appended records stay unflushed.",
              ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")),
    ConfigDef("index.interval.bytes", _I, 4096, at_least(0),
              "Bytes of log between two entries of the offset index.",
              ("log.index.interval.bytes",)),
    ConfigDef("local.retention.bytes", _L, -2, at_least(-2),
              "With remote.storage.enable, the local bytes a partition keeps of segments "
              "already tiered (-2: retention.bytes).",
              ("log.local.retention.bytes",)),
    ConfigDef("local.retention.ms", _L, -2, at_least(-2),
              "With remote.storage.enable, how long a tiered segment stays on local disk "
              "(-2: retention.ms).",
              ("log.local.retention.ms",)),
    ConfigDef("max.compaction.lag.ms", _L, LONG_MAX, at_least(1),
              "Oldest age a record may reach before the log becomes eligible for compaction.",
              ("log.cleaner.max.compaction.lag.ms",)),
    ConfigDef("max.message.bytes", _I, 1048588, at_least(0),
              "Largest record batch (after compression) the topic accepts.",
              ("message.max.bytes",)),
    ConfigDef("message.timestamp.type", _S, "CreateTime", TIMESTAMP_TYPE,
              "Record timestamps are the producer's (CreateTime) or the broker's append time "
              "(LogAppendTime).",
              ("log.message.timestamp.type",)),
    ConfigDef("message.timestamp.before.max.ms", _L, LONG_MAX, at_least(0),
              "With CreateTime, how far a record timestamp may lie before the broker's clock.",
              ("log.message.timestamp.before.max.ms",)),
    ConfigDef("message.timestamp.after.max.ms", _L, 3600000, at_least(0),
              "With CreateTime, how far a record timestamp may lie after the broker's clock.",
              ("log.message.timestamp.after.max.ms",)),
    ConfigDef("min.cleanable.dirty.ratio", _D, 0.5, in_range(0, 1),
              "Share of the log that must be uncompacted before the cleaner picks it.",
              ("log.cleaner.min.cleanable.ratio",)),
    ConfigDef("min.compaction.lag.ms", _L, 0, at_least(0),
              "Youngest age at which a record may be compacted away.",
              ("log.cleaner.min.compaction.lag.ms",)),
    ConfigDef("min.insync.replicas", _I, 1, at_least(1),
              "With acks=all, the fewest in-sync replicas that must have a write "
              "before it succeeds.",
              ("min.insync.replicas",)),
    ConfigDef("preallocate", _B, False, None,
              "Preallocate segment files at their full size when they are created; "
              "Tiercel supports only false.",
              ("log.preallocate",), unsupported=PREALLOCATE_UNSUPPORTED),
    ConfigDef("remote.log.copy.disable", _B, False, None,
              "Stop copying segments of a tiered topic; remote data stays readable."),
    ConfigDef("remote.log.delete.on.disable", _B, False, None,
              "Delete the remote data when remote.storage.enable is turned off."),
    ConfigDef("remote.storage.enable", _B, False, None,
              "Copy the topic's rolled segments to the remote tier (KIP-405)."),
    ConfigDef("retention.bytes", _L, -1, None,
              "Size a partition may reach before its oldest segments are deleted (-1: no limit).",
              ("log.retention.bytes",)),
    ConfigDef("retention.ms", _L, _WEEK_MS, at_least(-1),
              "How long a segment is kept before deletion (-1: no limit).",
              ("log.retention.ms", "log.retention.minutes", "log.retention.hours")),
    ConfigDef("segment.bytes", _I, 1073741824, at_least(14),
              "Size at which a segment is closed and a new one started.",
              ("log.segment.bytes",)),
    ConfigDef("segment.index.bytes", _I, 10485760, at_least(4),
              "Largest size of a segment's offset or time index.",
              ("log.index.size.max.bytes",)),
    ConfigDef("segment.jitter.ms", _L, 0, at_least(0),
              "Largest random time taken off segment.ms, to spread segment rolls out.",
              ("log.roll.jitter.ms", "log.roll.jitter.hours")),
    ConfigDef("segment.ms", _L, _WEEK_MS, at_least(1),
              "Age after which the active segment is rolled even if it is not full.",
              ("log.roll.ms", "log.roll.hours")),
    ConfigDef("unclean.leader.election.enable", _B, False, None,
              "Let a replica outside the ISR become leader as a last resort, "
              "at the risk of losing data.",
              ("unclean.leader.election.enable",)),
)}
# fmt: on

# Broker keys whose value is given in a coarser unit, with their factor to milliseconds.
_TO_MS: Final = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": _HOUR_MS,
    "log.roll.hours": _HOUR_MS,
    "log.roll.jitter.hours": _HOUR_MS,
}


def resolve_topic_default(topic_name: str, broker_values: Mapping[str, object]) -> object:
    """The default of a topic key: the value of its first broker synonym that is set.

    `broker_values` maps every broker key to its typed value (None when unset). Synonyms
    counted in hours or minutes are converted to milliseconds and, as in Kafka, a negative
    retention time from any synonym means no limit (-1).
    """
    defn = TOPIC_CONFIGS[topic_name]
    for synonym in defn.synonyms:
        value = broker_values[synonym]
        if value is None:
            continue
        if synonym in _TO_MS:
            assert isinstance(value, int)
            value = value * _TO_MS[synonym]
        if topic_name == "retention.ms":
            assert isinstance(value, int)
            return -1 if value < 0 else value
        return value
    return defn.default
