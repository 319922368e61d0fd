"""The offsets not yet tiered, read from a broker: a small blocking Kafka consumer.

The Spark source reads history from the object store; with ``kafka.bootstrap.servers``
it reads the rest (up to the high watermark) through this module in the same query.
It is a plain-socket client built on `protocol.client_frames` (the kio schemas the
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

import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from tiercel.protocol.client_frames import FrameError, decode_response, encode_request
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.record_batch import RecordBatchHeader, read_header
from tiercel.tiered.reader.read_committed import FetchAbortFilter
from tiercel.tiered.reader.record_batches import CorruptBatchError, append_batch, whole_batches
from tiercel.tiered.reader.record_columns import new_record_columns

__all__ = [
    "FETCH_MAX_BYTES",
    "BrokerTailError",
    "describe_topics",
    "high_watermarks",
    "log_start_offsets",
    "read_broker_range",
]

_API_VERSIONS: Final = (18, 3)
_METADATA: Final = (3, 12)
_LIST_OFFSETS: Final = (2, 7)
_FETCH: Final = (1, 12)
_APIS_USED: Final = {"Metadata": _METADATA, "ListOffsets": _LIST_OFFSETS, "Fetch": _FETCH}

FETCH_MAX_BYTES: Final = 50 * 1024 * 1024  # per response and per partition
_BATCH_BYTES: Final = 16 * 1024 * 1024  # keys and values per Arrow batch, as segment_reader
_FETCH_MAX_WAIT_MS: Final = 500  # a fetch at the high watermark waits this long for data
_LATEST: Final = -1
_EARLIEST: Final = -2
_CONSUMER: Final = -1  # replica id of a consumer
_BACKOFF_S: Final = 0.1
_BACKOFF_MAX_S: Final = 1.0
_SIZE: Final = struct.Struct(">i")
_MAX_RESPONSE_BYTES: Final = 1 << 30  # larger is a corrupt size field, not data
_CLIENT_ID: Final = "tiercel-broker-tail"

# What Kafka's consumer (Fetcher, OffsetFetcher) handles by refreshing metadata and
# trying again: leadership moved or is moving, or the topic is not known here yet.
_RETRIABLE: Final = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.replica_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.kafka_storage_error,
        ErrorCode.offset_not_available,
        ErrorCode.request_timed_out,
        ErrorCode.not_enough_replicas,
    }
)


class BrokerTailError(RuntimeError):
    """A broker-tail request that failed for good, or kept failing for ``timeout_s``."""


class _RetriableError(Exception):
    """Worth another try after a metadata refresh and a backoff."""


class _Deadline:
    """``timeout_s`` from now (or from the last `reset`), with Kafka's backoff; any
    thread may `cancel` the waits."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._cancelled = threading.Event()
        self.reset()

    def cancel(self) -> None:
        self._cancelled.set()

    def reset(self) -> None:
        self._end = time.monotonic() + self.timeout_s
        self._backoff = _BACKOFF_S

    def remaining(self) -> float:
        return self._end - time.monotonic()

    def backoff(self, error: str) -> None:
        """Sleep before the next try, or raise BrokerTailError with ``error`` when the
        next try would start after the deadline."""
        remaining = self.remaining()
        if remaining <= self._backoff:
            raise BrokerTailError(f"{error} (still failing after {self.timeout_s:g} s)")
        if self._cancelled.wait(self._backoff):
            raise BrokerTailError(f"{error} (the read was abandoned)")
        self._backoff = min(self._backoff * 2, _BACKOFF_MAX_S)


class _Connection:
    """One blocking socket to one broker; requests one at a time, in order."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.address = f"{host}:{port}"
        try:
            self._sock = socket.create_connection((host, port), timeout=max(timeout_s, 0.1))
        except OSError as e:
            raise _RetriableError(f"broker {self.address}: cannot connect ({e})") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation_id = 0
        try:
            self._check_versions(timeout_s)
        except BaseException:
            self._sock.close()
            raise

    def close(self) -> None:
        self._sock.close()

    def request(self, api: tuple[int, int], body: Mapping[str, Any], timeout_s: float) -> Any:
        api_key, version = api
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        try:
            self._sock.settimeout(max(timeout_s, 0.1))
            frame = encode_request(api_key, version, self._correlation_id, _CLIENT_ID, body)
            self._sock.sendall(b"".join(frame))
            (size,) = _SIZE.unpack(self._receive(_SIZE.size))
            if not 0 < size <= _MAX_RESPONSE_BYTES:
                raise FrameError(f"response size {size}")
            # kio reads read-only buffers only; a view avoids copying a 50 MB response.
            got, response = decode_response(self._receive(size).toreadonly(), api_key, version)
        except OSError as e:
            raise _RetriableError(f"broker {self.address}: {type(e).__name__}: {e}") from e
        except FrameError as e:  # not a passing failure: the same bytes would come again
            raise BrokerTailError(f"broker {self.address}: {e}") from e
        if got != self._correlation_id:
            raise _RetriableError(
                f"broker {self.address}: correlation id {got}, expected {self._correlation_id}"
            )
        return response

    def _receive(self, size: int) -> memoryview:
        view = memoryview(bytearray(size))
        got = 0
        while got < size:
            n = self._sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionError("connection closed by the broker")
            got += n
        return view

    def _check_versions(self, timeout_s: float) -> None:
        """ApiVersions first, as Kafka's NetworkClient: a broker too old for the fixed
        versions used here gets a clear error instead of a closed connection."""
        response = self.request(
            _API_VERSIONS,
            {"client_software_name": "tiercel-broker-tail", "client_software_version": "1"},
            timeout_s,
        )
        if response.error_code != ErrorCode.none:
            raise BrokerTailError(
                f"broker {self.address}: ApiVersions failed: {response.error_code}"
            )
        supported = {
            int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys
        }
        for name, (api_key, version) in _APIS_USED.items():
            low, high = supported.get(api_key, (0, -1))
            if not low <= version <= high:
                raise BrokerTailError(
                    f"broker {self.address} serves {name} versions {low}-{high}; "
                    f"the broker tail needs version {version}"
                )


class _Cluster:
    """Bootstrap servers, the brokers and leaders Metadata named, one connection per
    broker. Not thread-safe."""

    def __init__(self, bootstrap_servers: str, deadline: _Deadline) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._bootstrap = _parse_servers(bootstrap_servers)
        self.deadline = deadline
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._connections: dict[tuple[str, int], _Connection] = {}

    def __enter__(self) -> _Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def request(
        self, address: tuple[str, int], api: tuple[int, int], body: Mapping[str, Any]
    ) -> Any:
        """``body`` sent to the broker at ``address``; on a connection failure the
        connection is dropped (and _RetriableError raised) so the next try reconnects."""
        timeout_s = self.deadline.remaining() + _FETCH_MAX_WAIT_MS / 1000
        try:
            connection = self._connections.get(address)
            if connection is None:
                connection = self._connections[address] = _Connection(*address, timeout_s)
            return connection.request(api, body, timeout_s)
        except _RetriableError:
            dropped = self._connections.pop(address, None)
            if dropped is not None:
                dropped.close()
            # The broker may be gone: every leader is looked up again.
            self._leaders.clear()
            raise

    def metadata(self, topics: Sequence[str] | None) -> Any:
        """A Metadata response for ``topics`` (None: all), from a broker already
        connected, or else one known from Metadata, or else a bootstrap server."""
        body = {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        candidates = [*self._connections, *self._brokers.values(), *self._bootstrap]
        errors = []
        for address in dict.fromkeys(candidates):
            try:
                response = self.request(address, _METADATA, body)
            except _RetriableError as e:
                errors.append(str(e))
                continue
            self._brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code == ErrorCode.none and p.leader_id >= 0:
                        self._leaders[(topic.name, int(p.partition_index))] = int(p.leader_id)
            return response
        raise _RetriableError("; ".join(errors))

    def leader(self, topic: str, partition: int) -> tuple[str, int]:
        """The address of the partition's leader, by Metadata when not known yet."""
        key = (topic, partition)
        if key not in self._leaders:
            response = self.metadata([topic])
            for t in response.topics:
                if t.error_code != ErrorCode.none:
                    raise _RetriableError(f"topic {topic}: {t.error_code.name.upper()} in Metadata")
            if key not in self._leaders:
                raise _RetriableError(f"{topic}-{partition}: no leader in Metadata")
        node = self._leaders[key]
        if node not in self._brokers:
            del self._leaders[key]
            raise _RetriableError(f"{topic}-{partition}: leader {node} is not a live broker")
        return self._brokers[node]

    def forget_leader(self, topic: str, partition: int) -> None:
        self._leaders.pop((topic, partition), None)


def _parse_servers(bootstrap_servers: str) -> list[tuple[str, int]]:
    servers = []
    for item in bootstrap_servers.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise BrokerTailError(f"bad bootstrap server {item.strip()!r}: expected host:port")
        servers.append((host.strip("[]"), int(port)))
    return servers


def describe_topics(
    bootstrap_servers: str, topics: Sequence[str] | None = None, timeout_s: float = 30.0
) -> dict[str, list[int]]:
    """Topic -> sorted partition ids, for ``topics`` (None: every non-internal topic).
    A topic the broker does not know (or whose name is invalid) is absent."""
    deadline = _Deadline(timeout_s)
    with _Cluster(bootstrap_servers, deadline) as cluster:
        while True:
            try:
                response = cluster.metadata(topics)
            except _RetriableError as e:
                deadline.backoff(f"Metadata: {e}")
                continue
            result: dict[str, list[int]] = {}
            retry: list[str] = []
            for topic in response.topics:
                error = ErrorCode(topic.error_code)
                if error == ErrorCode.none:
                    if topics is None and topic.is_internal:
                        continue
                    result[topic.name] = sorted(int(p.partition_index) for p in topic.partitions)
                elif error in (
                    ErrorCode.unknown_topic_or_partition,
                    ErrorCode.invalid_topic_exception,
                ):
                    continue
                elif error in _RETRIABLE:
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
) -> dict[int, int]:
    """Partition -> high watermark (ListOffsets latest, read_uncommitted), each asked of
    its leader; the last stable offset with ``read_committed`` (isolation level 1)."""
    latest = {p: _LATEST for p in partitions}
    return _list_offsets(bootstrap_servers, topic, latest, timeout_s, int(read_committed))


def log_start_offsets(
    bootstrap_servers: str, topic: str, partitions: Sequence[int], timeout_s: float = 30.0
) -> dict[int, int]:
    """Partition -> log start offset (ListOffsets earliest), each asked of its leader."""
    return _list_offsets(bootstrap_servers, topic, {p: _EARLIEST for p in partitions}, timeout_s)


def _list_offsets(
    bootstrap_servers: str,
    topic: str,
    timestamps: Mapping[int, int],
    timeout_s: float,
    isolation_level: int = 0,
) -> dict[int, int]:
    deadline = _Deadline(timeout_s)
    result: dict[int, int] = {}
    with _Cluster(bootstrap_servers, deadline) as cluster:
        while len(result) < len(timestamps):
            errors: list[str] = []
            by_leader: dict[tuple[str, int], list[int]] = {}
            for partition in timestamps.keys() - result.keys():
                try:
                    by_leader.setdefault(cluster.leader(topic, partition), []).append(partition)
                except _RetriableError as e:
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
                    response = cluster.request(address, _LIST_OFFSETS, body)
                except _RetriableError as e:
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
                        elif error in _RETRIABLE:
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
) -> Iterator[pa.RecordBatch]:
    """The records of ``topic``-``partition`` at offsets ``first_offset`` to
    ``last_offset`` (inclusive), in order, each once, as Arrow batches of
    `record_columns.kafka_source_schema`. ``timeout_s`` bounds a stall (retries without
    progress), not the whole read. Offsets past the high watermark are waited for until
    then; transaction markers are skipped, aborted records kept (read_uncommitted), or
    with ``read_committed`` offsets up to the last stable offset are read and aborted
    records dropped.

    A helper thread sends the next Fetch as soon as a response's batch headers say where
    it starts, so the broker reads and sends it while this thread decodes."""
    if first_offset > last_offset:
        return
    deadline = _Deadline(timeout_s)
    columns = new_record_columns(include_headers)
    scratch = bytearray()  # lz4 and zstd records of one batch at a time
    with (
        _Cluster(bootstrap_servers, deadline) as cluster,
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
                        append_batch(columns, batch, header, fetched.offset, last_offset, scratch)
                except CorruptBatchError as e:
                    raise BrokerTailError(f"{fetched.where}: {e}") from e
                if columns.data_bytes >= _BATCH_BYTES:
                    yield columns.to_arrow(topic, partition)
                    columns = new_record_columns(include_headers)
        finally:
            deadline.cancel()  # a fetch still retrying stops; the executor awaits it
    if len(columns):
        yield columns.to_arrow(topic, partition)


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
    cluster: _Cluster,
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
    cluster: _Cluster,
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
    except _RetriableError as e:
        cluster.deadline.backoff(f"{where}: {e}")
        return None
    error = ErrorCode(data.error_code)
    if error == ErrorCode.none:
        return where, data
    if error in _RETRIABLE:
        cluster.forget_leader(topic, partition)
        cluster.deadline.backoff(f"{where}: {error.name.upper()}")
        return None
    if error == ErrorCode.offset_out_of_range:
        raise BrokerTailError(
            f"{where}: OFFSET_OUT_OF_RANGE: offsets {offset}-{last_offset} are no longer "
            f"(or not yet) on the broker{_bounds(cluster.bootstrap_servers, topic, partition)}"
        )
    raise BrokerTailError(f"{where}: {error.name.upper()}")


def _fetch(
    cluster: _Cluster,
    address: tuple[str, int],
    topic: str,
    partition: int,
    offset: int,
    read_committed: bool = False,
) -> Any:
    """The partition's data of one Fetch from ``address`` at ``offset``."""
    body = {
        "replica_id": _CONSUMER,
        "max_wait": _FETCH_MAX_WAIT_MS,
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
    response = cluster.request(address, _FETCH, body)
    if response.error_code != ErrorCode.none:
        raise _RetriableError(f"Fetch failed: {ErrorCode(response.error_code).name.upper()}")
    for t in response.responses:
        for p in t.partitions:
            if t.topic == topic and p.partition_index == partition:
                return p
    raise _RetriableError("the Fetch response lacks the partition")


def _bounds(bootstrap_servers: str, topic: str, partition: int) -> str:
    """ ", log start S, high watermark H" for an error message, or "" if unknown."""
    try:
        start = _list_offsets(bootstrap_servers, topic, {partition: _EARLIEST}, 5.0)[partition]
        end = _list_offsets(bootstrap_servers, topic, {partition: _LATEST}, 5.0)[partition]
    except BrokerTailError:
        return ""
    return f" (it holds offsets {start} to {end - 1}: log start {start}, high watermark {end})"
