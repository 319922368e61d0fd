"""``__remote_log_metadata`` through the broker's own pieces: the
`RemoteLogMetadataTopicClient` of the topic-based RemoteLogMetadataManager.

Where Kafka's RLMM runs a KafkaProducer, a KafkaConsumer and an Admin client against
its own broker, this broker uses what it has: the topic is created as
__consumer_offsets is (`internal_topic`); a record (null key, the serialized event, one
RecordBatch v2) is appended with acks=all and read as a consumer (read_uncommitted, up
to the high watermark) through the partition's leader: this broker's ReplicaManager
when it leads the metadata partition, else a `BrokerClient` to the leader the metadata
cache names. Produce and Fetch are Kafka's requests, so a leader of any kind answers.

A leader moving (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, a lost
connection, any retriable error) is retried after the metadata cache changes or a
backoff passes, until the caller cancels (the manager bounds its writes by
``remote.log.metadata.consume.wait.ms``). A fetch that fails is not retried here: the
consumer backs off itself. Non-retriable errors raise `RemoteStorageError`.

Each metadata partition has its own connections (one for produce, one for fetch), so
that one partition's long poll never delays another's records.

Event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.logging_setup import log_event
from tiercel.config.ssl_factory import outgoing_context
from tiercel.protocol.compression import decompress
from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.protocol.record_batch import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    ReadableBuffer,
    iter_batches,
    scan_batches,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.records import decode_records
from tiercel.server.admin_manager import AdminManager
from tiercel.server.delayed_fetch import FetchRequestPartition, FetchResult
from tiercel.server.internal_topic import ensure_internal_topic
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.replica_manager import ProduceResult
from tiercel.server.replication.broker_client import BrokerClient
from tiercel.storage.log_values import FetchIsolation
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_topic_client import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    MetadataFetch,
    MetadataTopicMismatchError,
)
from tiercel.tiered.rlmm.topic_based_remote_log_metadata_manager import (
    TopicBasedRemoteLogMetadataManager,
    snapshot_dir_for,
)
from tiercel.tiered.rlmm.topic_based_rlmm_config import TopicBasedRemoteLogMetadataManagerConfig
from tiercel.tiered.rsm.remote_storage_manager import RemoteStorageError

__all__ = [
    "BrokerRemoteLogMetadataTopic",
    "create_topic_based_rlmm",
    "fetch_request",
    "metadata_fetch_from_records",
    "parse_fetch_response",
    "parse_produce_response",
    "produce_request",
]

_log: Final = logging.getLogger("tiercel.rlmm")

_PRODUCE_KEY: Final = 0
_PRODUCE_VERSIONS: Final = (3, 11)
_FETCH_KEY: Final = 1
_FETCH_VERSIONS: Final = (12, 17)
_TOPIC_IDS_VERSION: Final = 13
_CONSUMER_REPLICA_ID: Final = -1
# Decoding and applying a record costs ~25 us on the event loop: 64 KiB (some 700
# records) keeps each fetch's processing near 15 ms, as a catch-up of a long topic runs.
_FETCH_MAX_BYTES: Final = 64 << 10
_ACKS_ALL: Final = -1


class _Retriable(Exception):
    """The leader moved or is unreachable: try again once the metadata may say more."""


class LocalReplicas(Protocol):
    """What is used of this broker's ReplicaManager."""

    @property
    def partitions(self) -> Mapping[TopicPartition, Any]: ...

    async def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytes | None],
        internal_topics_allowed: bool = False,
    ) -> dict[TopicPartition, ProduceResult]: ...

    async def fetch_messages(
        self,
        requests: list[FetchRequestPartition],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation: FetchIsolation,
        replica_id: int = -1,
    ) -> list[FetchResult]: ...


class RequestClient(Protocol):
    """What is used of a `BrokerClient`."""

    target_id: int

    async def request(
        self, api_key: int, versions: tuple[int, int], body: dict[str, Any]
    ) -> tuple[int, Any]: ...

    def close(self) -> None: ...


# -- requests and responses (sans-io) ---------------------------------------------------


def _check(error_code: int, what: str) -> None:
    """Nothing for NONE; `_Retriable` for a retriable Kafka error; else RemoteStorageError."""
    if error_code == ErrorCode.none:
        return
    code = ErrorCode(error_code)
    if code.retriable:
        raise _Retriable(f"{what}: {code.name}")
    raise RemoteStorageError(f"{what}: {code.name}")


def produce_request(partition: int, batch: bytes, timeout_ms: int) -> dict[str, Any]:
    """A Produce request appending ``batch`` to one metadata partition with acks=all."""
    return {
        "transactional_id": None,
        "acks": _ACKS_ALL,
        "timeout": timeout_ms,
        "topic_data": [
            {
                "name": REMOTE_LOG_METADATA_TOPIC_NAME,
                "partition_data": [{"index": partition, "records": batch}],
            }
        ],
    }


def parse_produce_response(response: Any, partition: int) -> int:
    """The base offset the leader appended at."""
    for topic in response.responses:
        if topic.name != REMOTE_LOG_METADATA_TOPIC_NAME:
            continue
        for p in topic.partition_responses:
            if p.index == partition:
                _check(p.error_code, f"produce to {REMOTE_LOG_METADATA_TOPIC_NAME}-{partition}")
                return int(p.base_offset)
    raise _Retriable(f"no answer for {REMOTE_LOG_METADATA_TOPIC_NAME}-{partition}")


def fetch_request(
    topic_id: uuid.UUID, partition: int, offset: int, max_wait_ms: int
) -> dict[str, Any]:
    """A consumer's Fetch (replica id -1, read_uncommitted, no session) of one metadata
    partition from ``offset``."""
    return {
        "replica_id": _CONSUMER_REPLICA_ID,
        "replica_state": {"replica_id": _CONSUMER_REPLICA_ID, "replica_epoch": -1},
        "max_wait": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": _FETCH_MAX_BYTES,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": REMOTE_LOG_METADATA_TOPIC_NAME,
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": _FETCH_MAX_BYTES,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


@dataclass(frozen=True, slots=True)
class _FetchedPartition:
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes


def parse_fetch_response(
    response: Any, version: int, topic_id: uuid.UUID, partition: int, offset: int
) -> MetadataFetch:
    """The records of the metadata partition in a Fetch response. A fetch below the log
    start answers OFFSET_OUT_OF_RANGE: the next fetch starts at the log start."""
    if response.error_code != ErrorCode.none:
        _check(response.error_code, "fetch")
    for topic in response.responses:
        ours = (
            topic.topic_id == topic_id
            if version >= _TOPIC_IDS_VERSION
            else topic.topic == REMOTE_LOG_METADATA_TOPIC_NAME
        )
        if not ours:
            continue
        for p in topic.partitions:
            if p.partition_index == partition:
                fetched = _FetchedPartition(
                    p.error_code, p.high_watermark, p.log_start_offset, p.records or b""
                )
                return _metadata_fetch(fetched, partition, offset)
    raise _Retriable(f"no answer for {REMOTE_LOG_METADATA_TOPIC_NAME}-{partition}")


def _metadata_fetch(fetched: _FetchedPartition, partition: int, offset: int) -> MetadataFetch:
    if (
        fetched.error_code == ErrorCode.offset_out_of_range
        and 0 <= offset < fetched.log_start_offset
    ):
        return MetadataFetch([], fetched.log_start_offset, fetched.high_watermark)
    _check(fetched.error_code, f"fetch from {REMOTE_LOG_METADATA_TOPIC_NAME}-{partition}")
    return metadata_fetch_from_records(fetched.records, offset, fetched.high_watermark)


def metadata_fetch_from_records(
    data: ReadableBuffer, offset: int, high_watermark: int
) -> MetadataFetch:
    """(offset, value) of every record at or after ``offset`` below the high watermark
    in whole, CRC-valid batches (a truncated last batch is left for the next fetch, as
    Kafka's consumer does); control batches and null values are passed over."""
    scan = scan_batches(data)
    reason = scan.invalid_reason
    if scan.batch_count == 0 and reason is not None and not reason.startswith("truncated"):
        # Kafka's consumer (check.crcs) stops at a corrupt batch too; the fetch is retried.
        raise RemoteStorageError(f"corrupt batch at offset {offset}: {reason}")
    view = memoryview(data)
    records: list[tuple[int, bytes]] = []
    next_offset = offset
    for pos, header in iter_batches(view, 0, scan.valid_bytes):
        if header.base_offset >= high_watermark:
            break
        next_offset = max(next_offset, header.next_offset)
        if header.is_control:
            continue
        section = decompress(
            header.compression,
            view[pos + RECORD_BATCH_OVERHEAD : pos + header.batch_length + LOG_OVERHEAD],
        )
        for record in decode_records(section, header.records_count):
            record_offset = header.base_offset + record.offset_delta
            if offset <= record_offset < high_watermark and record.value is not None:
                records.append((record_offset, bytes(record.value)))
    return MetadataFetch(records, next_offset, high_watermark)


# -- the client ----------------------------------------------------------------------------


def _leader_of(cache: MetadataCache, tp: TopicPartition) -> int:
    state = cache.partition_state(tp)
    return -1 if state is None else state.leader


class BrokerRemoteLogMetadataTopic:
    """Implements `RemoteLogMetadataTopicClient` for this broker (see the module
    docstring). Invariant: ``_clients`` holds at most one connection per (purpose,
    metadata partition), to that partition's leader when it was last used."""

    def __init__(
        self,
        node_id: int,
        replicas: LocalReplicas,
        cache: MetadataCache,
        admin: AdminManager,
        client_factory: Callable[[int], RequestClient],
        config: TopicBasedRemoteLogMetadataManagerConfig,
        request_timeout_ms: int = 30_000,
        cap_replication_factor: bool = True,
    ) -> None:
        self._node_id = node_id
        self._replicas = replicas
        self._cache = cache
        self._admin = admin
        self._client_factory = client_factory
        self._config = config
        self._request_timeout_ms = request_timeout_ms
        self._cap_replication_factor = cap_replication_factor
        self._clients: dict[tuple[str, int], RequestClient] = {}
        self._produce_locks: dict[int, asyncio.Lock] = {}

    @property
    def num_partitions(self) -> int:
        return self._config.topic_num_partitions

    async def ensure_topic(self) -> None:
        """As Kafka's RLMM: the topic must exist with the configured partition count;
        leaders may come later (produce and fetch wait for them)."""
        config = self._config
        if self._cache.topic(REMOTE_LOG_METADATA_TOPIC_NAME) is None:
            configs = {"retention.ms": str(config.topic_retention_ms), "cleanup.policy": "delete"}
            try:
                await ensure_internal_topic(
                    self._admin,
                    self._cache,
                    REMOTE_LOG_METADATA_TOPIC_NAME,
                    config.topic_num_partitions,
                    config.topic_replication_factor,
                    configs,
                    self._request_timeout_ms / 1000,
                    self._cap_replication_factor,
                )
            except KafkaError as e:
                raise RemoteStorageError(f"creating {REMOTE_LOG_METADATA_TOPIC_NAME}: {e}") from e
        topic = self._cache.topic(REMOTE_LOG_METADATA_TOPIC_NAME)
        if topic is None:
            raise RemoteStorageError(f"{REMOTE_LOG_METADATA_TOPIC_NAME} is not in the metadata yet")
        if topic.partition_count != config.topic_num_partitions:
            raise MetadataTopicMismatchError(
                f"{REMOTE_LOG_METADATA_TOPIC_NAME} has {topic.partition_count} partitions, "
                f"remote.log.metadata.topic.num.partitions is {config.topic_num_partitions}"
            )

    async def produce(self, metadata_partition: int, value: bytes) -> int:
        batch = build_record_batch([SimpleRecord(None, value, timestamp=int(time.time() * 1000))])
        attempt = 0
        while True:
            try:
                return await self._produce_once(metadata_partition, batch)
            except _Retriable as e:
                attempt += 1
                await self._back_off("produce", metadata_partition, attempt, e)

    async def _produce_once(self, metadata_partition: int, batch: bytes) -> int:
        tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, metadata_partition)
        leader = self._leader(tp)
        if leader == self._node_id:
            results = await self._replicas.append_records(
                self._request_timeout_ms, _ACKS_ALL, {tp: batch}
            )
            result = results[tp]
            if result.error is not None:
                _check(result.error.error_code, f"produce to {tp}")
            assert result.info is not None
            return result.info.first_offset
        lock = self._produce_locks.setdefault(metadata_partition, asyncio.Lock())
        async with lock:  # a BrokerClient carries one request at a time
            client = self._client("produce", metadata_partition, leader)
            body = produce_request(metadata_partition, batch, self._request_timeout_ms)
            _, response = await self._request(client, _PRODUCE_KEY, _PRODUCE_VERSIONS, body)
        return parse_produce_response(response, metadata_partition)

    async def fetch(self, metadata_partition: int, offset: int, max_wait_ms: int) -> MetadataFetch:
        try:
            return await self._fetch_once(metadata_partition, offset, max_wait_ms)
        except _Retriable as e:
            raise RemoteStorageError(str(e)) from e

    async def _fetch_once(
        self, metadata_partition: int, offset: int, max_wait_ms: int
    ) -> MetadataFetch:
        tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, metadata_partition)
        leader = self._leader(tp)
        if leader == self._node_id:
            request = FetchRequestPartition(tp, offset, _FETCH_MAX_BYTES, None)
            (result,) = await self._replicas.fetch_messages(
                [request], max_wait_ms, 1, _FETCH_MAX_BYTES, FetchIsolation.HIGH_WATERMARK
            )
            if result.error is not None:
                fetched = _FetchedPartition(
                    result.error.error_code, -1, self._local_log_start(tp), b""
                )
                return _metadata_fetch(fetched, metadata_partition, offset)
            read = result.read
            assert read is not None
            return metadata_fetch_from_records(read.info.records, offset, read.high_watermark)
        topic = self._cache.topic(REMOTE_LOG_METADATA_TOPIC_NAME)
        if topic is None:
            raise _Retriable(f"{REMOTE_LOG_METADATA_TOPIC_NAME} is not in the metadata")
        client = self._client("fetch", metadata_partition, leader)
        body = fetch_request(topic.topic_id, metadata_partition, offset, max_wait_ms)
        version, response = await self._request(client, _FETCH_KEY, _FETCH_VERSIONS, body)
        return parse_fetch_response(response, version, topic.topic_id, metadata_partition, offset)

    def _local_log_start(self, tp: TopicPartition) -> int:
        partition = self._replicas.partitions.get(tp)
        return -1 if partition is None else int(partition.log.log_start_offset)

    def _leader(self, tp: TopicPartition) -> int:
        leader = _leader_of(self._cache, tp)
        if leader < 0:
            raise _Retriable(f"{tp} has no leader")
        return leader

    def _client(self, purpose: str, metadata_partition: int, leader: int) -> RequestClient:
        key = (purpose, metadata_partition)
        client = self._clients.get(key)
        if client is not None and client.target_id != leader:
            client.close()
            client = None
        if client is None:
            client = self._clients[key] = self._client_factory(leader)
        return client

    async def _request(
        self, client: RequestClient, api_key: int, versions: tuple[int, int], body: dict[str, Any]
    ) -> tuple[int, Any]:
        """The answer; `_Retriable` when the connection failed (the client closed it),
        RemoteStorageError when the broker cannot answer this API."""
        try:
            return await client.request(api_key, versions, body)
        # EOFError: the connection closed mid-response (IncompleteReadError); ValueError:
        # a frame that does not decode.
        except (OSError, EOFError, TimeoutError, ValueError) as e:
            raise _Retriable(f"broker {client.target_id}: {e!r}") from e
        except KafkaError as e:  # no common version
            raise RemoteStorageError(f"broker {client.target_id}: {e}") from e

    async def _back_off(
        self, what: str, metadata_partition: int, attempt: int, e: Exception
    ) -> None:
        """Wait until the metadata names another leader, at most the current backoff."""
        backoff_ms = min(
            self._config.retry_backoff_max_ms,
            self._config.retry_backoff_ms * 2 ** min(attempt - 1, 20),
        )
        log_event(
            _log,
            logging.INFO,
            "rlmm_topic_retry",
            request=what,
            metadata_partition=metadata_partition,
            attempt=attempt,
            reason=str(e),
        )
        tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, metadata_partition)
        before = self._cache.partition_state(tp)
        leader = -1 if before is None else before.leader
        await self._cache.wait_until(lambda c: _leader_of(c, tp) != leader, backoff_ms / 1000)

    async def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


def create_topic_based_rlmm(
    config: BrokerConfig,
    node_id: int,
    replicas: LocalReplicas,
    cache: MetadataCache,
    admin: AdminManager,
    rlmm_props: Mapping[str, str],
) -> TopicBasedRemoteLogMetadataManager:
    """The broker's RemoteLogMetadataManager, not started: ``rlmm_props`` are the
    ``rlmm.config.`` properties (with or without the prefix); snapshots go under the
    first log dir. Inter-broker requests go to the leaders' inter-broker listeners."""

    def client_factory(leader_id: int) -> BrokerClient:
        return BrokerClient(
            leader_id,
            lambda: cache.broker_endpoint(leader_id, config.inter_broker_listener_name),
            f"tiercel-rlmm-{node_id}",
            config.replica_socket_timeout_ms / 1000,
            ssl_context=outgoing_context(config, config.inter_broker_listener_name),
            sasl_plain_login=config.inter_broker_sasl_login(),
        )

    rlmm_config = TopicBasedRemoteLogMetadataManagerConfig.from_props(rlmm_props)
    # A cluster's brokers register one by one: capping the replication factor at the
    # live brokers would give the first one to start a topic of one replica for good.
    # As Kafka's TopicBasedRemoteLogMetadataManager.createTopic, a cluster retries the
    # creation (remote.log.metadata.initialization.retry.*) until enough brokers are
    # alive; the single node (not a KRaft node) caps, so that it tiers out of the box.
    topic = BrokerRemoteLogMetadataTopic(
        node_id,
        replicas,
        cache,
        admin,
        client_factory,
        rlmm_config,
        cap_replication_factor=not config.kraft_mode,
    )
    return TopicBasedRemoteLogMetadataManager(
        topic, rlmm_config, snapshot_dir_for(config.log_dirs[0])
    )
