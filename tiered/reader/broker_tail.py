"""The offsets not yet tiered, read from a broker: a small blocking Kafka consumer.

The Spark source reads history from the object store; with ``kafka.bootstrap.servers``
it reads the rest (up to the high watermark) through this module in the same query.
It talks to the brokers through `broker_client` (plain sockets and the kio schemas the
broker itself serves), so it runs in Spark executors with no event loop and no client
library beyond what the reader already needs:

- `describe_topics`: Metadata v12 (``allow_auto_topic_creation`` false), as a
  consumer's ``listTopics``/``partitionsFor``;
- `high_watermarks`: ListOffsets v7 with timestamp -1 (latest) and read_uncommitted,
  sent to each partition's leader, which answers with its high watermark (Kafka's
  ``ListOffsetsRequest.LATEST_TIMESTAMP``);
- `read_broker_range`: Fetch v12 (topic names; v13+ would need topic ids) from the
  leader, without a fetch session, as a consumer with isolation.level=read_uncommitted
  (or read_committed: isolation_level 1, up to the last stable offset, the response's
  aborted transactions dropped by `read_committed.FetchAbortFilter`).
  Responses carry record batches exactly as the leader's log holds them; they are cut,
  checked (CRC-32C), decompressed and decoded into Arrow by `record_batches`, the code
  that decodes remote segments, clipped to the range so each offset comes once. A
  batch that starts below the range is clipped; a partial batch at a response's end is
  dropped and fetched whole next time (Kafka trims responses at ``max_bytes``); fetches
  repeat from the offset after the last batch until the range's end is passed. A fetch
  below the leader's local log start on a tiered topic is served by the broker from the
  remote tier (KIP-405), so any range the broker still holds can be read.

Leaders come from Metadata; NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
LEADER_NOT_AVAILABLE (and the other errors Kafka's consumer retries after a metadata
refresh) and connection failures are retried with exponential backoff (100 ms doubling
to 1 s, Kafka's retry.backoff.ms / retry.backoff.max.ms, KIP-580) until ``timeout_s``
has passed without progress; then `BrokerTailError` says which broker, topic,
partition and error. OFFSET_OUT_OF_RANGE is not retried: the range is gone (retention,
DeleteRecords) and the error says so with the partition's current bounds.

Limits: PLAINTEXT listeners only — SASL and TLS are not supported; one connection per
broker per call, one request in flight (sent by a helper thread, so that the broker
prepares the next response while this one decodes); a call is not thread-safe (one
iterator per thread), separate calls are independent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.record_batch import RecordBatchHeader, read_header
from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.tiered.reader.broker_client import (
    FETCH,
    FETCH_MAX_WAIT_MS,
    LIST_OFFSETS,
    RETRIABLE_ERRORS,
    BrokerCluster,
    BrokerTailError,
    Deadline,
    RetriableError,
)
from tiercel.tiered.reader.client_security import PLAINTEXT, ClientSecurity
from tiercel.tiered.reader.read_committed import FetchAbortFilter
from tiercel.tiered.reader.record_batches import (
    DEFAULT_BATCH_BYTES,
    ArrowBatcher,
    CorruptBatchError,
    whole_batches,
)

__all__ = [
    "FETCH_MAX_BYTES",
    "BrokerTailError",
    "TopicDescription",
    "describe_topics",
    "describe_topics_with_ids",
    "high_watermarks",
    "log_start_offsets",
    "read_broker_range",
]

FETCH_MAX_BYTES: Final = 50 * 1024 * 1024  # per response and per partition
_LATEST: Final = -1
_EARLIEST: Final = -2
_CONSUMER: Final = -1  # replica id of a consumer


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic as the broker's Metadata describes it: its topic id (Kafka's base64
    form, as the remote tier's prefixes name it) and sorted partition ids."""

    topic_id: str
    partitions: list[int]


def describe_topics(
    bootstrap_servers: str,
    topics: Sequence[str] | None = None,
    timeout_s: float = 30.0,
    *,
    security: ClientSecurity = PLAINTEXT,
) -> dict[str, list[int]]:
    """Topic -> sorted partition ids, for ``topics`` (None: every non-internal topic).
    A topic the broker does not know (or whose name is invalid) is absent."""
    described = describe_topics_with_ids(bootstrap_servers, topics, timeout_s, security=security)
    return {topic: d.partitions for topic, d in described.items()}


def describe_topics_with_ids(
    bootstrap_servers: str,
    topics: Sequence[str] | None = None,
    timeout_s: float = 30.0,
    *,
    security: ClientSecurity = PLAINTEXT,
) -> dict[str, TopicDescription]:
    """`describe_topics` with each topic's id (Metadata v10+ carries it)."""
    deadline = Deadline(timeout_s)
    with BrokerCluster(bootstrap_servers, deadline, security) as cluster:
        while True:
            try:
                response = cluster.metadata(topics)
            except RetriableError as e:
                deadline.backoff(f"Metadata: {e}")
                continue
            result: dict[str, TopicDescription] = {}
            retry: list[str] = []
            for topic in response.topics:
                error = ErrorCode(topic.error_code)
                if error == ErrorCode.none:
                    if topics is None and topic.is_internal:
                        continue
                    result[topic.name] = TopicDescription(
                        uuid_to_kafka_str(topic.topic_id),
                        sorted(int(p.partition_index) for p in topic.partitions),
                    )
                elif error in (
                    ErrorCode.unknown_topic_or_partition,
                    ErrorCode.invalid_topic_exception,
                ):
                    continue
                elif error in RETRIABLE_ERRORS:
                    retry.append(f"topic {topic.name}: {error.name.upper()}")
                else:
                    raise BrokerTailError(f"Metadata for topic {topic.name}: {error.name.upper()}")
            if not retry:
                return result
            deadline.backoff("Metadata: " + "; ".join(retry))


def high_watermarks(
    bootstrap_servers: str,
    topic: str,
    partitions: Sequence[int],
    timeout_s: float = 30.0,
    read_committed: bool = False,
    *,
    security: ClientSecurity = PLAINTEXT,
) -> dict[int, int]:
    """Partition -> high watermark (ListOffsets latest, read_uncommitted), each asked of
    its leader; the last stable offset with ``read_committed`` (isolation level 1)."""
    latest = {p: _LATEST for p in partitions}
    return _list_offsets(bootstrap_servers, topic, latest, timeout_s, int(read_committed), security)


def log_start_offsets(
    bootstrap_servers: str,
    topic: str,
    partitions: Sequence[int],
    timeout_s: float = 30.0,
    *,
    security: ClientSecurity = PLAINTEXT,
) -> dict[int, int]:
    """Partition -> log start offset (ListOffsets earliest), each asked of its leader."""
    earliest = {p: _EARLIEST for p in partitions}
    return _list_offsets(bootstrap_servers, topic, earliest, timeout_s, 0, security)


def _list_offsets(
    bootstrap_servers: str,
    topic: str,
    timestamps: Mapping[int, int],
    timeout_s: float,
    isolation_level: int = 0,
    security: ClientSecurity = PLAINTEXT,
) -> dict[int, int]:
    deadline = Deadline(timeout_s)
    result: dict[int, int] = {}
    with BrokerCluster(bootstrap_servers, deadline, security) as cluster:
        while len(result) < len(timestamps):
            errors: list[str] = []
            by_leader: dict[tuple[str, int], list[int]] = {}
            for partition in timestamps.keys() - result.keys():
                try:
                    by_leader.setdefault(cluster.leader(topic, partition), []).append(partition)
                except RetriableError as e:
                    errors.append(str(e))
            for address, owned in by_leader.items():
                body = {
                    "replica_id": _CONSUMER,
                    "isolation_level": isolation_level,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": p,
                                    "current_leader_epoch": -1,
                                    "timestamp": timestamps[p],
                                }
                                for p in sorted(owned)
                            ],
                        }
                    ],
                }
                try:
                    response = cluster.request(address, LIST_OFFSETS, body)
                except RetriableError as e:
                    errors.append(str(e))
                    continue
                for t in response.topics:
                    for p in t.partitions:
                        partition, error = int(p.partition_index), ErrorCode(p.error_code)
                        where = f"broker {address[0]}:{address[1]}: ListOffsets {topic}-{partition}"
                        if t.name != topic or partition not in timestamps:
                            continue
                        if error == ErrorCode.none:
                            result[partition] = int(p.offset)
                        elif error in RETRIABLE_ERRORS:
                            cluster.forget_leader(topic, partition)
                            errors.append(f"{where}: {error.name.upper()}")
                        else:
                            raise BrokerTailError(f"{where}: {error.name.upper()}")
            if len(result) < len(timestamps):
                deadline.backoff("; ".join(errors) or f"ListOffsets {topic}: partitions missing")
    return result


def read_broker_range(
    bootstrap_servers: str,
    topic: str,
    partition: int,
    first_offset: int,
    last_offset: int,
    include_headers: bool = False,
    timeout_s: float = 30.0,
    read_committed: bool = False,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    *,
    security: ClientSecurity = PLAINTEXT,
) -> Iterator[pa.RecordBatch]:
    """The records of ``topic``-``partition`` at offsets ``first_offset`` to
    ``last_offset`` (inclusive), in order, each once, as Arrow batches of
    `record_columns.kafka_source_schema` of about ``batch_bytes`` each. ``timeout_s``
    bounds a stall (retries without progress), not the whole read. Offsets past the high
    watermark are waited for until then; transaction markers are skipped, aborted
    records kept (read_uncommitted), or with ``read_committed`` offsets up to the last
    stable offset are read and aborted records dropped.

    A helper thread sends the next Fetch as soon as a response's batch headers say where
    it starts, so the broker reads and sends it while this thread decodes."""
    if first_offset > last_offset:
        return
    deadline = Deadline(timeout_s)
    batcher = ArrowBatcher(topic, partition, include_headers, batch_bytes)
    with (
        BrokerCluster(bootstrap_servers, deadline, security) as cluster,
        ThreadPoolExecutor(1, thread_name_prefix="tiercel-broker-tail") as prefetch,
    ):
        try:
            args = (cluster, topic, partition, read_committed)
            pending: Future[_Fetched] | None = prefetch.submit(
                _fetch_ahead, *args, first_offset, last_offset
            )
            while pending is not None:
                fetched = pending.result()
                pending = None
                if fetched.next_offset <= last_offset:
                    pending = prefetch.submit(_fetch_ahead, *args, fetched.next_offset, last_offset)
                aborts = FetchAbortFilter(fetched.aborted) if read_committed else None
                try:
                    for at, size, header in fetched.batches:
                        if aborts is not None and aborts.drops(header):
                            continue
                        batch = memoryview(fetched.records)[at : at + size]
                        yield from batcher.append(batch, header, fetched.offset, last_offset)
                except CorruptBatchError as e:
                    raise BrokerTailError(f"{fetched.where}: {e}") from e
        finally:
            deadline.cancel()  # a fetch still retrying stops; the executor awaits it
    yield from batcher.flush()


@dataclass(frozen=True, slots=True)
class _Fetched:
    """One Fetch response's whole batches within the range, found by their headers."""

    where: str
    records: bytes
    batches: list[tuple[int, int, RecordBatchHeader]]  # (position, size, header)
    offset: int  # fetched at: records below it were read from an earlier response
    next_offset: int  # where the next fetch starts; past the range's end: done
    aborted: tuple[tuple[int, int], ...] = ()  # read_committed: (producer id, first offset)


def _fetch_ahead(
    cluster: BrokerCluster,
    topic: str,
    partition: int,
    read_committed: bool,
    offset: int,
    last_offset: int,
) -> _Fetched:
    """Fetch at ``offset`` until a response holds records of the range (or shows the
    range has no more), with backoff; BrokerTailError after ``timeout_s`` without."""
    while True:
        fetched = _fetch_partition(cluster, topic, partition, offset, last_offset, read_committed)
        if fetched is None:
            continue  # retried after a backoff
        where, data = fetched
        records = data.records or b""
        try:
            batches, next_offset = _batches_in_range(records, offset, last_offset)
        except CorruptBatchError as e:
            raise BrokerTailError(f"{where}: {e}") from e
        if next_offset > offset:
            cluster.deadline.reset()
            aborted = tuple(
                (int(a.producer_id), int(a.first_offset)) for a in data.aborted_transactions or ()
            )
            return _Fetched(where, records, batches, offset, next_offset, aborted)
        # read_committed: the last stable offset bounds what a fetch returns.
        high_watermark = data.last_stable_offset if read_committed else data.high_watermark
        if high_watermark <= offset:
            cluster.deadline.backoff(f"{where}: past the high watermark {high_watermark}")
        elif records:
            # KIP-74: the first batch comes whole whatever the size limit, so bytes with
            # no whole batch are a broken response, not a reason to wait.
            raise BrokerTailError(f"{where}: no whole batch in {len(records)} bytes")
        else:
            cluster.deadline.backoff(
                f"{where}: no records below the high watermark {high_watermark}"
            )


def _batches_in_range(
    records: bytes, offset: int, last_offset: int
) -> tuple[list[tuple[int, int, RecordBatchHeader]], int]:
    """The whole batches of ``records`` holding offsets ``offset`` to ``last_offset``,
    and the offset after the last of them (past ``last_offset`` when the range ends
    here). A partial batch at the end is left for the next fetch."""
    batches: list[tuple[int, int, RecordBatchHeader]] = []
    next_offset = offset
    for at, size in whole_batches(records):
        header = read_header(records, at)
        if header.base_offset > last_offset:
            return batches, last_offset + 1  # nothing left in the range: compacted away
        if header.last_offset < next_offset:
            continue  # a batch the range starts after
        batches.append((at, size, header))
        next_offset = header.last_offset + 1
    return batches, next_offset


def _fetch_partition(
    cluster: BrokerCluster,
    topic: str,
    partition: int,
    offset: int,
    last_offset: int,
    read_committed: bool = False,
) -> tuple[str, Any] | None:
    """(where, partition data) of one Fetch at ``offset`` from the leader; None after a
    retriable failure and its backoff; BrokerTailError for any other error."""
    where = f"{topic}-{partition} at offset {offset}"
    try:
        address = cluster.leader(topic, partition)
        where = f"broker {address[0]}:{address[1]}: Fetch {where}"
        data = _fetch(cluster, address, topic, partition, offset, read_committed)
    except RetriableError as e:
        cluster.deadline.backoff(f"{where}: {e}")
        return None
    error = ErrorCode(data.error_code)
    if error == ErrorCode.none:
        return where, data
    if error in RETRIABLE_ERRORS:
        cluster.forget_leader(topic, partition)
        cluster.deadline.backoff(f"{where}: {error.name.upper()}")
        return None
    if error == ErrorCode.offset_out_of_range:
        raise BrokerTailError(
            f"{where}: OFFSET_OUT_OF_RANGE: offsets {offset}-{last_offset} are no longer "
            f"(or not yet) on the broker{_bounds(cluster, topic, partition)}"
        )
    raise BrokerTailError(f"{where}: {error.name.upper()}")


def _fetch(
    cluster: BrokerCluster,
    address: tuple[str, int],
    topic: str,
    partition: int,
    offset: int,
    read_committed: bool = False,
) -> Any:
    """The partition's data of one Fetch from ``address`` at ``offset``."""
    body = {
        "replica_id": _CONSUMER,
        "max_wait": FETCH_MAX_WAIT_MS,
        "min_bytes": 1,
        "max_bytes": FETCH_MAX_BYTES,
        "isolation_level": int(read_committed),
        "session_id": 0,  # no fetch session (KIP-227): every request is a full fetch
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": FETCH_MAX_BYTES,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    response = cluster.request(address, FETCH, body)
    if response.error_code != ErrorCode.none:
        raise RetriableError(f"Fetch failed: {ErrorCode(response.error_code).name.upper()}")
    for t in response.responses:
        for p in t.partitions:
            if t.topic == topic and p.partition_index == partition:
                return p
    raise RetriableError("the Fetch response lacks the partition")


def _bounds(cluster: BrokerCluster, topic: str, partition: int) -> str:
    """ ", log start S, high watermark H" for an error message, or "" if unknown."""
    servers, security = cluster.bootstrap_servers, cluster.security
    try:
        start = _list_offsets(servers, topic, {partition: _EARLIEST}, 5.0, 0, security)[partition]
        end = _list_offsets(servers, topic, {partition: _LATEST}, 5.0, 0, security)[partition]
    except BrokerTailError:
        return ""
    return f" (it holds offsets {start} to {end - 1}: log start {start}, high watermark {end})"
