"""Options of Spark's Kafka source that a tiercel read accepts without using them, so that
a batch query switched from ``format("kafka")`` to ``format("tiercel")`` needs no other
change; and the ``kafka.*`` settings Spark itself refuses, refused with its reasons.

What Spark 4's Kafka source does with them in a batch read (KafkaSourceProvider's
validateGeneralOptions and validateBatchOptions, KafkaBatch.planInputPartitions,
kafkaParamsForExecutors):

- ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``maxTriggerDelay``: streaming
  rate limits; a batch query logs that it ignores them;
- ``groupIdPrefix``, ``kafka.group.id``: the consumer group its executors' consumers are
  given (they assign partitions and never commit, so it changes no row); a tiercel read
  joins no group (the broker tail fetches without one);
- ``fetchOffset.numRetries``, ``fetchOffset.retryIntervalMs``,
  ``kafkaConsumer.pollTimeoutMs``: its offset lookups' retries and its consumers' poll
  timeout; the broker tail retries with its own backoff and deadline;
- every other ``kafka.*`` consumer setting (ConsumerConfig) is handed to its consumers;
  here they tune no consumer, except ``kafka.bootstrap.servers``,
  ``kafka.isolation.level`` and the security settings (``kafka.security.protocol``,
  ``kafka.ssl.*``, ``kafka.sasl.*``), which `options` parses for the broker tail;
- ``kafka.auto.offset.reset``, ``kafka.key.deserializer``, ``kafka.value.deserializer``,
  ``kafka.enable.auto.commit``, ``kafka.interceptor.classes``: refused, here as there.

``maxRecordsPerPartition``, which Spark 4 applies to batch reads too, is not here: the
read honours it (`slices`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Final

__all__ = [
    "NOT_APPLYING",
    "REFUSED",
    "log_not_applying",
    "not_applying",
]

_log = logging.getLogger(__name__)

# Spark's own options (lower case, as Spark's CaseInsensitiveMap keys them) -> why a
# tiercel read has no use for them.
NOT_APPLYING: Final[Mapping[str, str]] = {
    "maxoffsetspertrigger": "a streaming rate limit, which Spark ignores in batch queries",
    "minoffsetspertrigger": "a streaming rate limit, which Spark ignores in batch queries",
    "maxtriggerdelay": "a streaming trigger delay, which Spark ignores in batch queries",
    "groupidprefix": "a tiercel read joins no consumer group",
    "fetchoffset.numretries": "the broker tail retries with its own backoff and deadline",
    "fetchoffset.retryintervalms": "the broker tail retries with its own backoff and deadline",
    "kafkaconsumer.polltimeoutms": "a tiercel read polls no Kafka consumer",
}

# Kafka's consumer settings (ConsumerConfig, Kafka 4) that a tiercel read has no use
# for: it runs no KafkaConsumer; the broker tail has its own fetch sizes, timeouts and
# backoff, and joins no group.
_CONSUMER_CONFIGS: Final = frozenset(
    {
        "allow.auto.create.topics",
        "auto.commit.interval.ms",
        "check.crcs",
        "client.dns.lookup",
        "client.id",
        "client.rack",
        "connections.max.idle.ms",
        "default.api.timeout.ms",
        "enable.metrics.push",
        "exclude.internal.topics",
        "fetch.max.bytes",
        "fetch.max.wait.ms",
        "fetch.min.bytes",
        "group.id",
        "group.instance.id",
        "group.protocol",
        "group.remote.assignor",
        "heartbeat.interval.ms",
        "max.partition.fetch.bytes",
        "max.poll.interval.ms",
        "max.poll.records",
        "metadata.max.age.ms",
        "metadata.recovery.rebootstrap.trigger.ms",
        "metadata.recovery.strategy",
        "metric.reporters",
        "metrics.num.samples",
        "metrics.recording.level",
        "metrics.sample.window.ms",
        "partition.assignment.strategy",
        "receive.buffer.bytes",
        "reconnect.backoff.max.ms",
        "reconnect.backoff.ms",
        "request.timeout.ms",
        "retry.backoff.max.ms",
        "retry.backoff.ms",
        "security.providers",
        "send.buffer.bytes",
        "session.timeout.ms",
        "socket.connection.setup.timeout.max.ms",
        "socket.connection.setup.timeout.ms",
    }
)
# kafka.* settings Spark's validateGeneralOptions refuses in every query -> its reason.
REFUSED: Final[Mapping[str, str]] = {
    "kafka.auto.offset.reset": (
        "not supported: set startingOffsets to earliest or to offsets instead, as Spark's "
        "Kafka source asks"
    ),
    "kafka.key.deserializer": "not supported: keys are read as bytes, as in Spark's Kafka source",
    "kafka.value.deserializer": (
        "not supported: values are read as bytes, as in Spark's Kafka source"
    ),
    "kafka.enable.auto.commit": "not supported, as in Spark's Kafka source: nothing commits",
    "kafka.interceptor.classes": "not supported, as in Spark's Kafka source",
}


def not_applying(given: Mapping[str, str]) -> dict[str, str]:
    """Of ``given`` (lower-case names), the options accepted without use -> why:
    `NOT_APPLYING`'s, and the ``kafka.*`` consumer settings. The caller refuses the
    `REFUSED` ones and judges the security settings."""
    found = {}
    for name in given:
        if name in NOT_APPLYING:
            found[name] = NOT_APPLYING[name]
            continue
        setting = name.removeprefix("kafka.")
        if setting == name:
            continue
        if setting in _CONSUMER_CONFIGS:
            found[name] = "a Kafka consumer setting, and a tiercel read runs no Kafka consumer"
    return found


def log_not_applying(ignored: Sequence[tuple[str, str]]) -> None:
    """A warning for each (option as given, reason) that does not apply, as Spark's Kafka
    source logs the streaming options it ignores in a batch query."""
    for name, reason in ignored:
        _log.warning("option %s does not apply to a tiercel read and is ignored: %s", name, reason)
