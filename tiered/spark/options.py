"""The options of ``spark.read.format("tiercel")``, parsed and checked before any task
runs, with the names and meanings of Spark's Kafka source (KafkaSourceProvider's
validateGeneralOptions and validateBatchOptions) where they exist.

Option names are case-insensitive, as Spark's are (the data source gets a
CaseInsensitiveDict). An unknown option is an error rather than ignored: a misspelt
``endingOffset`` must not silently read to the end of the tier. The options Spark's
Kafka source takes that a tiercel read has no use for (streaming rate limits, consumer
groups, ``kafka.*`` consumer settings: `kafka_source_options`) are accepted and listed in
``ReadOptions.not_applying``, for the reader to log, so that a batch query switched from
``format("kafka")`` needs no other change; those Spark refuses are refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from tiercel.tiered.reader.client_security import (
    CLIENT_SECURITY_KEYS,
    PLAINTEXT,
    ClientSecurity,
    ClientSecurityError,
    client_security,
)
from tiercel.tiered.spark.kafka_source_options import REFUSED, not_applying

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetBound",
    "ReadOptions",
    "TiercelOptionError",
    "parse_options",
]

EARLIEST: Final = -2  # the special offsets of the Kafka source's JSON (and ListOffsets)
LATEST: Final = -1

# Keys Spark itself may add to a data source's options; ignored, not an error.
_SPARK_KEYS: Final = frozenset({"paths"})
_KNOWN: Final = frozenset(
    {
        "path",
        "s3.endpoint.url",
        "s3.region",
        "subscribe",
        "subscribepattern",
        "assign",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "endingtimestamp",
        "startingoffsetsbytimestamp",
        "endingoffsetsbytimestamp",
        "startingoffsetsbytimestampstrategy",
        "failondataloss",
        "minpartitions",
        "maxrecordsperpartition",
        "includeheaders",
        "kafka.bootstrap.servers",
        "filterpushdown",
        "kafka.isolation.level",
    }
)
_SECURITY_PREFIXES: Final = ("kafka.security.protocol", "kafka.ssl.", "kafka.sasl.")

PartitionKey = tuple[str, int]


class TiercelOptionError(ValueError):
    """An option of the tiercel data source is missing, unknown or has a bad value."""


@dataclass(frozen=True, slots=True)
class OffsetBound:
    """One end of the read, by precedence as the Kafka source takes it: ``timestamp``
    (startingTimestamp / endingTimestamp) for every partition, else ``timestamps`` per
    partition (…OffsetsByTimestamp), else ``offsets`` per partition (JSON, with
    EARLIEST / LATEST), else ``default`` (EARLIEST or LATEST) for all."""

    default: int
    offsets: Mapping[PartitionKey, int] | None = None
    timestamp: int | None = None
    timestamps: Mapping[PartitionKey, int] | None = None


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Every option, parsed. Exactly one of ``subscribe``, ``subscribe_pattern`` and
    ``assign`` is set."""

    path: str
    s3_endpoint_url: str | None
    s3_region: str | None
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: Mapping[str, tuple[int, ...]] | None
    starting: OffsetBound
    ending: OffsetBound
    starting_timestamp_strategy: Literal["error", "latest"]
    fail_on_data_loss: bool
    min_partitions: int | None
    include_headers: bool
    bootstrap_servers: str | None
    filter_pushdown: bool
    read_committed: bool = False
    """kafka.isolation.level=read_committed: aborted transactions' records skipped, the
    read stops at the last stable offset (of the tier, and of the broker for the tail)."""
    max_records_per_partition: int | None = None
    """Each Spark task reads at most this many offsets (`slices`), as Spark 4's Kafka
    source splits a batch read's offset ranges (KafkaOffsetRangeCalculator)."""
    not_applying: tuple[tuple[str, str], ...] = ()
    """(option as given, why it does not apply): Kafka-source options accepted unused."""
    security: ClientSecurity = PLAINTEXT
    """How the broker tail connects: ``kafka.security.protocol``, ``kafka.ssl.*`` and
    ``kafka.sasl.*`` as Spark's Kafka source hands them to its consumers."""


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """``options`` (any case) checked and parsed; TiercelOptionError saying what is
    wrong with which option."""
    given = {key.lower(): value for key, value in options.items()}
    refused = sorted(set(given) & set(REFUSED))
    if refused:
        raise TiercelOptionError(f"option {refused[0]}: {REFUSED[refused[0]]}")
    security, ignored_security = _security(given)
    ignored = {**not_applying(given), **ignored_security}
    security_keys = {k for k in given if k.startswith(_SECURITY_PREFIXES)}
    unknown = sorted(set(given) - _KNOWN - _SPARK_KEYS - set(ignored) - security_keys)
    if unknown:
        raise TiercelOptionError(
            f"unknown option(s) {', '.join(unknown)} for format tiercel; known: "
            + ", ".join(sorted(_KNOWN))
        )
    path = given.get("path")
    if not path:
        raise TiercelOptionError(
            "option path is required: the remote tier's root, file:///dir or s3://bucket/prefix"
        )
    subscribe, pattern, assign = _subscription(given)
    return ReadOptions(
        path=path,
        s3_endpoint_url=given.get("s3.endpoint.url") or None,
        s3_region=given.get("s3.region") or None,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=_bound(given, "starting", EARLIEST),
        ending=_bound(given, "ending", LATEST),
        starting_timestamp_strategy=_strategy(given),
        fail_on_data_loss=_boolean(given, "failondataloss", "failOnDataLoss", True),
        min_partitions=_min_partitions(given),
        include_headers=_boolean(given, "includeheaders", "includeHeaders", False),
        bootstrap_servers=_bootstrap(given),
        filter_pushdown=_boolean(given, "filterpushdown", "filterPushdown", False),
        read_committed=_isolation_level(given),
        max_records_per_partition=_max_records_per_partition(given),
        security=security,
        not_applying=tuple(
            sorted((name, ignored[name.lower()]) for name in options if name.lower() in ignored)
        ),
    )


def _security(given: Mapping[str, str]) -> tuple[ClientSecurity, dict[str, str]]:
    """The broker tail's ClientSecurity from the ``kafka.`` security settings, and those
    that do not apply -> why: every one when no broker is read, and the Java client's
    settings with no counterpart here (ssl.keymanager.algorithm, sasl.login.*...)."""
    settings = {k: v for k, v in given.items() if k.startswith(_SECURITY_PREFIXES)}
    if "kafka.bootstrap.servers" not in given:
        reason = "no broker is read without kafka.bootstrap.servers"
        return PLAINTEXT, dict.fromkeys(settings, reason)
    used = {k.removeprefix("kafka."): v for k, v in settings.items()}
    used = {k: v for k, v in used.items() if k in CLIENT_SECURITY_KEYS}
    ignored = {
        k: "a setting of Java's Kafka client that the broker tail has no counterpart for"
        for k in settings
        if k.removeprefix("kafka.") not in used
    }
    try:
        return client_security(used), ignored
    except ClientSecurityError as e:
        raise TiercelOptionError(f"the broker tail's security options (kafka.*): {e}") from None


def _isolation_level(given: Mapping[str, str]) -> bool:
    """True for read_committed; the Kafka source passes ``kafka.isolation.level`` to
    its consumers, read_uncommitted by default."""
    value = given.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if value not in ("read_uncommitted", "read_committed"):
        raise TiercelOptionError(
            f"option kafka.isolation.level must be read_uncommitted or read_committed, "
            f"not {value!r}"
        )
    return value == "read_committed"


def _subscription(
    given: Mapping[str, str],
) -> tuple[tuple[str, ...] | None, str | None, dict[str, tuple[int, ...]] | None]:
    chosen = [name for name in ("subscribe", "subscribepattern", "assign") if name in given]
    if len(chosen) != 1:
        raise TiercelOptionError(
            "exactly one of subscribe, subscribePattern and assign is required"
            + (f" (got {', '.join(chosen)})" if chosen else "")
        )
    value = given[chosen[0]]
    if chosen[0] == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise TiercelOptionError(f"subscribe: no topic in {value!r}")
        return topics, None, None
    if chosen[0] == "subscribepattern":
        value = value.strip()  # as Spark's SubscribePatternStrategy(value.trim())
        if not value:
            raise TiercelOptionError("subscribePattern is empty")
        try:
            re.compile(value)
        except re.error as e:
            raise TiercelOptionError(f"subscribePattern {value!r}: {e}") from e
        return None, value, None
    parsed = _json_object(value, "assign")
    assign = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not all(_is_int(p) and p >= 0 for p in partitions):
            raise TiercelOptionError(
                f'assign: topic {topic!r} needs a list of partition numbers, as {{"t":[0,1]}}'
            )
        assign[topic] = tuple(sorted(set(partitions)))
    if not assign:
        raise TiercelOptionError("assign: no topic partitions in {}")
    return None, None, assign


def _bound(given: Mapping[str, str], end: str, default: int) -> OffsetBound:
    """startingOffsets and the rest (``end`` "starting") or the ending ones."""
    name = f"{end}Offsets"
    value = given.get(name.lower(), "earliest" if default == EARLIEST else "latest").strip()
    offsets: dict[PartitionKey, int] | None = None
    # In a batch query a read starts at or after its end never: Spark's
    # validateBatchOptions refuses "latest" to start and "earliest" to end.
    refused = LATEST if end == "starting" else EARLIEST
    if value.lower() in ("earliest", "latest"):
        chosen = EARLIEST if value.lower() == "earliest" else LATEST
        if chosen == refused:
            raise TiercelOptionError(f"{name}: {value} is not allowed in a batch query")
        default = chosen
    else:
        offsets = {}
        for key, offset in _per_partition(value, name).items():
            if offset == refused or offset < EARLIEST:
                raise TiercelOptionError(
                    f"{name}: offset {offset} for {key[0]}-{key[1]} is not allowed in a "
                    "batch query (-2 is earliest, -1 latest)"
                )
            offsets[key] = offset
    timestamps = None
    by_timestamp = given.get(f"{end}offsetsbytimestamp")
    if by_timestamp is not None:
        timestamps = _per_partition(by_timestamp, f"{end}OffsetsByTimestamp")
        for key, stamp in timestamps.items():
            if stamp < 0:
                raise TiercelOptionError(
                    f"{end}OffsetsByTimestamp: timestamp {stamp} for {key[0]}-{key[1]} is negative"
                )
    timestamp = None
    if f"{end}timestamp" in given:
        timestamp = _integer(given[f"{end}timestamp"], f"{end}Timestamp", 0)
    return OffsetBound(default, offsets, timestamp, timestamps)


def _per_partition(value: str, name: str) -> dict[PartitionKey, int]:
    """``{"topic":{"0":23,"1":-2}}`` as {(topic, 0): 23, (topic, 1): -2}."""
    found = {}
    for topic, partitions in _json_object(value, name).items():
        if not isinstance(partitions, dict):
            raise TiercelOptionError(f'{name}: expected {{"topic":{{"0":23}}}}, got {value!r}')
        for partition, number in partitions.items():
            if not partition.isdigit() or not _is_int(number):
                raise TiercelOptionError(
                    f"{name}: {topic!r}: partition {partition!r} maps to {number!r}; "
                    "expected a partition number and an integer"
                )
            found[(topic, int(partition))] = number
    return found


def _json_object(value: str, name: str) -> dict[str, object]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise TiercelOptionError(f"{name}: not JSON ({e}): {value!r}") from e
    if not isinstance(parsed, dict):
        raise TiercelOptionError(f"{name}: expected a JSON object, got {value!r}")
    return parsed


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(value: str, name: str, minimum: int) -> int:
    try:
        number = int(value.strip())
    except ValueError as e:
        raise TiercelOptionError(f"{name}: {value!r} is not an integer") from e
    if number < minimum:
        raise TiercelOptionError(f"{name}: {number} is below {minimum}")
    return number


def _boolean(given: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    value = given.get(key)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise TiercelOptionError(f"{name}: {value!r} is not true or false")
    return value.strip().lower() == "true"


def _strategy(given: Mapping[str, str]) -> Literal["error", "latest"]:
    value = given.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if value == "error":
        return "error"
    if value == "latest":
        return "latest"
    raise TiercelOptionError(
        f"startingOffsetsByTimestampStrategy: {value!r} is not error or latest"
    )


def _min_partitions(given: Mapping[str, str]) -> int | None:
    value = given.get("minpartitions")
    return None if value is None else _integer(value, "minPartitions", 1)


def _max_records_per_partition(given: Mapping[str, str]) -> int | None:
    """Positive, as Spark's validateGeneralOptions requires."""
    value = given.get("maxrecordsperpartition")
    return None if value is None else _integer(value, "maxRecordsPerPartition", 1)


def _bootstrap(given: Mapping[str, str]) -> str | None:
    value = given.get("kafka.bootstrap.servers")
    if value is None:
        return None
    servers = [s.strip() for s in value.split(",")]
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise TiercelOptionError(
                f"kafka.bootstrap.servers: {server!r} is not host:port (in {value!r})"
            )
    return ",".join(servers)
