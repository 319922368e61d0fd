"""Broker and topic config definitions: Kafka's property names, types, defaults and checks.

Each key is a `ConfigDef`; `BROKER_CONFIGS` and `TOPIC_CONFIGS` list them in the order the
example file shows them. Defaults and checks are Kafka 3.9's (the last release with
ZooKeeper), except where Tiercel must differ to run as a single node out of the box
(node.id, listeners, log.dirs); cluster.id is Tiercel's own key (Kafka keeps the id only in
meta.properties), and listeners and log.dirs are LISTs as in Kafka 4.

Parsing follows Kafka's `ConfigDef.parseType`: strings are trimmed, booleans are
"true"/"false" in any case, lists are comma-separated, and integers are range-checked for
their Java width. Values are also accepted as YAML scalars (and YAML sequences for lists).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum
from typing import Final

__all__ = [
    "BROKER_CONFIGS",
    "LONG_MAX",
    "TOPIC_CONFIGS",
    "AtLeast",
    "ConfigDef",
    "ConfigError",
    "ConfigSource",
    "ConfigType",
    "InRange",
    "ListOf",
    "NonEmptyDistinct",
    "OneOf",
    "Validator",
    "at_least",
    "broker_synonyms",
    "canonical_broker_name",
    "closest",
    "in_range",
    "list_of",
    "non_empty_distinct",
    "one_of",
    "parse_value",
    "render_value",
    "resolve_topic_default",
]

LONG_MAX: Final = 2**63 - 1


class ConfigError(Exception):
    """A config key or value was rejected; `key` names it (None for file-level problems)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    @property
    def message(self) -> str:
        return str(self)


class ConfigType(IntEnum):
    """Kafka's `ConfigDef.Type`, numbered as DescribeConfigs' config_type field."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Where a described value comes from, numbered as DescribeConfigs' config_source."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


# --- validators: callables raising ValueError with a sentence a user can act on ------------

Validator = Callable[[object], None]


@dataclass(frozen=True, slots=True)
class AtLeast:
    """Accepts numbers >= minimum; str() is Kafka's "[min,...]" notation."""

    minimum: float

    def __call__(self, value: object) -> None:
        if not isinstance(value, int | float) or value < self.minimum:
            raise ValueError(f"must be at least {_number(self.minimum)}")

    def __str__(self) -> str:
        return f"[{_number(self.minimum)},...]"


@dataclass(frozen=True, slots=True)
class InRange:
    """Accepts numbers in [low, high]; str() is Kafka's "[low,...,high]" notation."""

    low: float
    high: float

    def __call__(self, value: object) -> None:
        if not isinstance(value, int | float) or not self.low <= value <= self.high:
            raise ValueError(f"must be between {_number(self.low)} and {_number(self.high)}")

    def __str__(self) -> str:
        return f"[{_number(self.low)},...,{_number(self.high)}]"


@dataclass(frozen=True, slots=True)
class OneOf:
    """Accepts exactly one of `choices` (case-sensitive, as Kafka's ValidString)."""

    choices: tuple[str, ...]

    def __call__(self, value: object) -> None:
        if value not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}")

    def __str__(self) -> str:
        return f"[{', '.join(self.choices)}]"


@dataclass(frozen=True, slots=True)
class ListOf:
    """Applies `element` to every item of a list value (Kafka's ValidList)."""

    element: Validator

    def __call__(self, value: object) -> None:
        if not isinstance(value, tuple):
            raise ValueError("must be a list")
        for item in value:
            try:
                self.element(item)
            except ValueError as e:
                raise ValueError(f"element {item!r} {e}") from None

    def __str__(self) -> str:
        return str(self.element)


@dataclass(frozen=True, slots=True)
class NonEmptyDistinct:
    """Accepts a list with at least one element and no element twice."""

    def __call__(self, value: object) -> None:
        if not isinstance(value, tuple) or not value:
            raise ValueError("must name at least one entry")
        if len(set(value)) != len(value):
            raise ValueError("must not name the same entry twice")

    def __str__(self) -> str:
        return "non-empty list without duplicates"


def at_least(minimum: float) -> AtLeast:
    return AtLeast(minimum)


def in_range(low: float, high: float) -> InRange:
    return InRange(low, high)


def one_of(*choices: str) -> OneOf:
    return OneOf(choices)


def list_of(element: Validator) -> ListOf:
    return ListOf(element)


def non_empty_distinct() -> NonEmptyDistinct:
    return NonEmptyDistinct()


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


# --- the definition record ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config key. Invariant: `default` is None or already of `type`'s Python form
    (bool, str, int, float, tuple[str, ...]) and passes `validator`.

    `synonyms` (topic keys only) are the broker keys that supply the topic default, in
    Kafka's order of precedence. `aliases` are other spellings of a broker key (broker.id
    for node.id). Immutable; any thread.
    """

    name: str
    type: ConfigType
    default: object
    validator: Validator | None
    doc: str
    synonyms: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()


# --- parsing and rendering ----------------------------------------------------------------

_INT_BOUNDS: Final = {
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
}
_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_DECIMAL: Final = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _expected(t: ConfigType) -> str:
    if t in _INT_BOUNDS:
        low, high = _INT_BOUNDS[t]
        return f"{t.name} (a whole number from {low} to {high})"
    return {
        ConfigType.BOOLEAN: "BOOLEAN (true or false)",
        ConfigType.DOUBLE: "DOUBLE (a decimal number)",
        ConfigType.LIST: "LIST (comma-separated values or a YAML list)",
        ConfigType.CLASS: "CLASS (a class name)",
    }.get(t, f"{t.name} (a string)")


def parse_value(defn: ConfigDef, raw: object, key: str | None = None) -> object:
    """`raw` (a string, YAML scalar or YAML list) converted to `defn`'s type and validated.

    ConfigError names the key (`key` when the user spelled it differently, e.g. an alias),
    the value as given and what was expected.
    """
    key = key or defn.name
    try:
        value = _convert(defn.type, raw)
    except ValueError:
        raise ConfigError(
            f"Invalid value {raw!r} for configuration {key}: expected {_expected(defn.type)}",
            key,
        ) from None
    if defn.validator is not None:
        try:
            defn.validator(value)
        except ValueError as e:
            raise ConfigError(f"Invalid value {raw!r} for configuration {key}: {e}", key) from None
    return value


def _convert(t: ConfigType, raw: object) -> object:
    if t is ConfigType.BOOLEAN:
        return _to_bool(raw)
    if t in _INT_BOUNDS:
        return _to_int(t, raw)
    if t is ConfigType.DOUBLE:
        return _to_double(raw)
    if t is ConfigType.LIST:
        return _to_list(raw)
    if isinstance(raw, str):
        return raw.strip()
    # YAML reads an all-digit string (a cluster id, say) as an int; keep its text.
    if t is ConfigType.STRING and isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)
    raise ValueError


def _to_bool(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ValueError


def _to_int(t: ConfigType, raw: object) -> int:
    if isinstance(raw, bool):
        raise ValueError
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and _INTEGER.fullmatch(raw.strip()):
        value = int(raw.strip())
    else:
        raise ValueError
    low, high = _INT_BOUNDS[t]
    if not low <= value <= high:
        raise ValueError
    return value


def _to_double(raw: object) -> float:
    if isinstance(raw, bool):
        raise ValueError
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str) and _DECIMAL.fullmatch(raw.strip()):
        value = float(raw.strip())
    else:
        raise ValueError
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError
    return value


def _to_list(raw: object) -> tuple[str, ...]:
    if isinstance(raw, str):
        text = raw.strip()
        items: Sequence[object] = re.split(r"\s*,\s*", text) if text else []
    elif isinstance(raw, list | tuple):
        items = raw
    else:
        raise ValueError
    out: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise ValueError
        text = str(item).strip()
        if not text:
            raise ValueError
        out.append(text)
    return tuple(out)


def render_value(t: ConfigType, value: object) -> str | None:
    """Kafka's `ConfigDef.convertToString`: the text DescribeConfigs reports for a value."""
    if value is None:
        return None
    if t is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if t is ConfigType.LIST:
        assert isinstance(value, tuple)
        return ",".join(value)
    if t is ConfigType.DOUBLE:
        assert isinstance(value, float)
        return _java_double(value)
    return str(value)


def _java_double(x: float) -> str:
    """Java's Double.toString: plain between 1e-3 and 1e7, otherwise d.dddE±n."""
    if x == 0.0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    if 1e-3 <= abs(x) < 1e7:
        return repr(x)
    sign, digits, exponent = Decimal(repr(x)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{len(text) + exponent - 1}"


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The valid key a mistyped `name` most likely meant, if any is close enough."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


# --- the definitions ----------------------------------------------------------------------

_B = ConfigType.BOOLEAN
_S = ConfigType.STRING
_I = ConfigType.INT
_H = ConfigType.SHORT
_L = ConfigType.LONG
_D = ConfigType.DOUBLE
_LIST = ConfigType.LIST

_HOUR_MS: Final = 3_600_000
_WEEK_MS: Final = 168 * _HOUR_MS
_COMPRESSION: Final = one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TIMESTAMP_TYPE: Final = one_of("CreateTime", "LogAppendTime")
_CLEANUP_POLICY: Final = list_of(one_of("compact", "delete"))
# Kafka's assignor class names (its default, in its order) and their short names.
_CONSUMER_GROUP_ASSIGNORS: Final = (
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
    "uniform",
    "range",
)


def _defs(*defs: ConfigDef) -> Mapping[str, ConfigDef]:
    return {d.name: d for d in defs}


# The tables keep one key to a few lines so that they read as tables.
# fmt: off
BROKER_CONFIGS: Final[Mapping[str, ConfigDef]] = _defs(
    # Identity and cluster membership.
    ConfigDef("node.id", _I, 1, at_least(0),
              "Identifier of this broker, unique within its cluster.", aliases=("broker.id",)),
    ConfigDef("cluster.id", _S, None, None,
              "Identifier of the cluster; when unset the broker generates one on first start."),
    ConfigDef("zookeeper.connect", _S, None, None,
              "ZooKeeper connection string host:port[,host:port...][/chroot]; when unset, "
              "cluster metadata stays in a local file-backed store."),
    ConfigDef("zookeeper.session.timeout.ms", _I, 6000, None,
              "ZooKeeper session timeout; when the session expires the broker is deregistered "
              "(Kafka's default before 2.5, KIP-537)."),
    ConfigDef("zookeeper.connection.timeout.ms", _I, None, None,
              "How long to wait for a ZooKeeper connection; when unset, "
              "zookeeper.session.timeout.ms is used."),
    # Network.
    ConfigDef("listeners", _LIST, ("PLAINTEXT://127.0.0.1:9092",), non_empty_distinct(),
              "Comma-separated addresses to listen on as NAME://host:port; "
              "an empty host means all interfaces."),
    ConfigDef("advertised.listeners", _LIST, None, None,
              "Addresses handed to clients in metadata; when unset, listeners is used."),
    ConfigDef("listener.security.protocol.map", _LIST,
              ("PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT",
               "SASL_SSL:SASL_SSL"), None,
              "Listener name to security protocol, as NAME:PROTOCOL pairs; Tiercel serves "
              "listeners mapped to PLAINTEXT."),
    ConfigDef("socket.send.buffer.bytes", _I, 102400, None,
              "SO_SNDBUF of accepted sockets; -1 keeps the operating system default."),
    ConfigDef("socket.receive.buffer.bytes", _I, 102400, None,
              "SO_RCVBUF of accepted sockets; -1 keeps the operating system default."),
    ConfigDef("socket.request.max.bytes", _I, 104857600, at_least(1),
              "Largest request the broker accepts; a bigger frame closes the connection."),
    ConfigDef("queued.max.requests", _I, 500, at_least(1),
              "Requests a connection may have in flight before the broker stops reading it."),
    ConfigDef("connections.max.idle.ms", _L, 600000, None,
              "Idle connections are closed after this many milliseconds."),
    ConfigDef("message.max.bytes", _I, 1048588, at_least(0),
              "Largest record batch (after compression) the broker accepts; "
              "topics override it with max.message.bytes."),
    # Topics.
    ConfigDef("num.partitions", _I, 1, at_least(1),
              "Partition count of topics created without an explicit count."),
    ConfigDef("default.replication.factor", _I, 1, None,
              "Replication factor of topics created without an explicit one."),
    ConfigDef("auto.create.topics.enable", _B, True, None,
              "Create a missing topic when a client asks for its metadata."),
    ConfigDef("delete.topic.enable", _B, True, None,
              "Allow topics to be deleted with the DeleteTopics API."),
    ConfigDef("min.insync.replicas", _I, 1, at_least(1),
              "With acks=all, the fewest in-sync replicas that must have a write "
              "before it succeeds."),
    ConfigDef("unclean.leader.election.enable", _B, False, None,
              "Let a replica outside the ISR become leader as a last resort, "
              "at the risk of losing data."),
    ConfigDef("compression.type", _S, "producer", _COMPRESSION,
              "Codec of stored batches; producer keeps whatever codec the producer used."),
    # Log layout and retention.
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
    ConfigDef("log.cleanup.policy", _LIST, ("delete",), _CLEANUP_POLICY,
              "What happens to old segments: delete, compact (by key), or both."),
    ConfigDef("log.index.interval.bytes", _I, 4096, at_least(0),
              "Bytes of log between two entries of the offset index."),
    ConfigDef("log.index.size.max.bytes", _I, 10485760, at_least(4),
              "Largest size of an offset or time index; a full index rolls the segment."),
    ConfigDef("log.segment.delete.delay.ms", _L, 60000, at_least(0),
              "Delay between marking a segment deleted and removing its files."),
    ConfigDef("log.preallocate", _B, False, None,
              "Preallocate segment files at their full size when they are created."),
    ConfigDef("log.message.timestamp.type", _S, "CreateTime", _TIMESTAMP_TYPE,
              "Record timestamps are the producer's (CreateTime) or the broker's append time "
              "(LogAppendTime)."),
    ConfigDef("log.message.timestamp.before.max.ms", _L, LONG_MAX, at_least(0),
              "With CreateTime, how far a record timestamp may lie before the broker's clock."),
    # Kafka 4.0 lowered this default from Long.MAX to one hour.
    ConfigDef("log.message.timestamp.after.max.ms", _L, 3600000, at_least(0),
              "With CreateTime, how far a record timestamp may lie after the broker's clock."),
    # Flushing and checkpoints.
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
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", _L, 5000, None,
              "How often high watermarks are written to the replication-offset checkpoint."),
    # Log cleaner (compaction).
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
    # Consumer groups and producer state.
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
    ConfigDef("transactional.id.expiration.ms", _I, 604800000, at_least(1),
              "How long an idle transactional id is kept before it expires."),
    ConfigDef("producer.id.expiration.ms", _I, 86400000, at_least(1),
              "How long the state of an idle idempotent producer is kept."),
    ConfigDef("producer.id.expiration.check.interval.ms", _I, 600000, at_least(1),
              "How often producer state older than producer.id.expiration.ms is removed."),
    # Replication and leadership.
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
    ConfigDef("replica.socket.timeout.ms", _I, 30000, at_least(1),
              "How long a follower waits for its leader to answer a request."),
    ConfigDef("inter.broker.listener.name", _S, None, None,
              "Listener brokers use to reach each other (replica fetching); when unset, "
              "the first listener."),
    ConfigDef("controlled.shutdown.enable", _B, True, None,
              "Move partition leadership away before the broker shuts down."),
    ConfigDef("auto.leader.rebalance.enable", _B, True, None,
              "Periodically move leadership back to each partition's preferred replica."),
    ConfigDef("leader.imbalance.check.interval.seconds", _L, 300, at_least(1),
              "How often the controller checks whether leadership needs rebalancing."),
    ConfigDef("leader.imbalance.per.broker.percentage", _I, 10, at_least(0),
              "Share of a broker's preferred partitions led elsewhere, in percent, above "
              "which the controller moves leadership back."),
    ConfigDef("controlled.shutdown.max.retries", _I, 3, at_least(1),
              "Attempts a shutting-down broker makes to have its leadership moved away."),
    ConfigDef("controlled.shutdown.retry.backoff.ms", _L, 5000, at_least(0),
              "How long each controlled shutdown attempt waits for leadership to move."),
)

TOPIC_CONFIGS: Final[Mapping[str, ConfigDef]] = _defs(
    ConfigDef("cleanup.policy", _LIST, ("delete",), _CLEANUP_POLICY,
              "Old segments are deleted, compacted to the latest record per key, or both.",
              ("log.cleanup.policy",)),
    ConfigDef("compression.type", _S, "producer", _COMPRESSION,
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
    ConfigDef("max.compaction.lag.ms", _L, LONG_MAX, at_least(1),
              "Oldest age a record may reach before the log becomes eligible for compaction.",
              ("log.cleaner.max.compaction.lag.ms",)),
    ConfigDef("max.message.bytes", _I, 1048588, at_least(0),
              "Largest record batch (after compression) the topic accepts.",
              ("message.max.bytes",)),
    ConfigDef("message.timestamp.type", _S, "CreateTime", _TIMESTAMP_TYPE,
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
              "Preallocate segment files at their full size when they are created.",
              ("log.preallocate",)),
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
)
# fmt: on

_BROKER_ALIASES: Final = {a: d.name for d in BROKER_CONFIGS.values() for a in d.aliases}

# Broker keys whose value is given in a coarser unit, with their factor to milliseconds.
_TO_MS: Final = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": _HOUR_MS,
    "log.roll.hours": _HOUR_MS,
    "log.roll.jitter.hours": _HOUR_MS,
}

# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: any member of a group describes the
# whole group. log.flush.scheduler.interval.ms alone is not a member: it is only the
# fallback of log.flush.interval.ms.
_SYNONYM_GROUPS: Final = {
    name: group
    for group in (
        ("log.roll.ms", "log.roll.hours"),
        ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    )
    for name in group
} | {"log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")}


def canonical_broker_name(name: str) -> str:
    """The key an alias stands for (broker.id -> node.id); other names unchanged."""
    return _BROKER_ALIASES.get(name, name)


def broker_synonyms(name: str) -> tuple[str, ...]:
    """Broker keys that together decide `name`'s value, highest precedence first."""
    return _SYNONYM_GROUPS.get(name, (name,))


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
