"""Group coordinator definitions: Kafka's `GroupCoordinatorConfig` (__consumer_offsets,
classic and consumer groups).

Part of the broker registry `kafka_config.BROKER_CONFIGS`; see `config_def` for the
parsing and validation rules.
"""

from __future__ import annotations

from typing import Final

from tiercel.config.config_def import (
    ConfigDef,
    ConfigType,
    at_least,
    in_range,
    list_of,
    one_of,
)

_I = ConfigType.INT
_H = ConfigType.SHORT
_L = ConfigType.LONG
_LIST = ConfigType.LIST

# Kafka's assignor class names (its default, in its order) and their short names.
_CONSUMER_GROUP_ASSIGNORS: Final = (
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
    "uniform",
    "range",
)

# The table keeps one key to a few lines so that it reads as a table.
# fmt: off
GROUP_COORDINATOR_CONFIGS: Final[tuple[ConfigDef, ...]] = (
    ConfigDef("offsets.topic.num.partitions", _I, 50, at_least(1),
              "Partition count of the __consumer_offsets topic; fixed once the topic exists."),
    ConfigDef("offsets.topic.replication.factor", _H, 3, at_least(1),
              "Replication factor of __consumer_offsets, capped at the number of live "
              "brokers when the topic is created."),
    ConfigDef("offsets.topic.segment.bytes", _I, 104857600, at_least(1),
              "Segment size of __consumer_offsets; small segments compact and load faster."),
    ConfigDef("offsets.topic.compression.codec", _I, 0, in_range(0, 4),
              "Codec id of the batches the group coordinator writes (0 none, 1 gzip, "
              "2 snappy, 3 lz4, 4 zstd)."),
    ConfigDef("offsets.load.buffer.size", _I, 5242880, at_least(1),
              "Bytes read at a time when a coordinator loads a __consumer_offsets partition."),
    ConfigDef("offsets.commit.timeout.ms", _I, 5000, at_least(1),
              "How long an offset commit or group update waits for its write to be replicated."),
    ConfigDef("offset.metadata.max.bytes", _I, 4096, None,
              "Longest metadata string an offset commit may carry."),
    ConfigDef("offsets.retention.minutes", _I, 10080, at_least(1),
              "How long the committed offsets of an empty group are kept."),
    ConfigDef("offsets.retention.check.interval.ms", _L, 600000, at_least(1),
              "How often expired committed offsets are looked for."),
    ConfigDef("group.initial.rebalance.delay.ms", _I, 3000, None,
              "How long a new group waits for more members before its first rebalance."),
    ConfigDef("group.min.session.timeout.ms", _I, 6000, None,
              "Smallest session timeout a group member may ask for."),
    ConfigDef("group.max.session.timeout.ms", _I, 1800000, None,
              "Largest session timeout a group member may ask for."),
    ConfigDef("group.max.size", _I, 2147483647, at_least(1),
              "Most members a classic group may have."),
    ConfigDef("group.consumer.heartbeat.interval.ms", _I, 5000, at_least(1),
              "How often members of consumer groups (KIP-848 protocol) send a heartbeat; "
              "keep it below group.consumer.session.timeout.ms."),
    ConfigDef("group.consumer.session.timeout.ms", _I, 45000, at_least(1),
              "How long a consumer-group member may go without a heartbeat before it is "
              "removed and its partitions reassigned."),
    ConfigDef("group.consumer.assignors", _LIST, _CONSUMER_GROUP_ASSIGNORS[:2],
              list_of(one_of(*_CONSUMER_GROUP_ASSIGNORS)),
              "Server-side assignors consumer-group members may ask for (uniform, range, "
              "or Kafka's class names); the first is the default."),
    ConfigDef("group.consumer.max.size", _I, 2147483647, at_least(1),
              "Most members a consumer group may have."),
)
# fmt: on
