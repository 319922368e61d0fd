"""The broker side of __remote_log_metadata without a broker process: the Produce and
Fetch requests it builds (encoded with the wire codec), the responses it reads (kio
entities holding real record batches), and its retries as the leader moves, against a
real MetadataCache and scripted connections."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from tiercel.protocol.client_frames import encode_request
from tiercel.protocol.compression import CompressionType
from tiercel.protocol.entities import (
    build_entity,
    decode_request_body,
    request_class,
    response_class,
)
from tiercel.protocol.errors import ErrorCode, NotLeaderOrFollowerError
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.partition import PartitionState
from tiercel.server.remote_log_metadata_topic import (
    BrokerRemoteLogMetadataTopic,
    fetch_request,
    metadata_fetch_from_records,
    parse_fetch_response,
    parse_produce_response,
    produce_request,
)
from tiercel.server.replica_manager import ProduceResult
from tiercel.storage.topic_partition import TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_topic_client import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    MetadataFetch,
    MetadataTopicMismatchError,
)
from tiercel.tiered.rlmm.topic_based_rlmm_config import TopicBasedRemoteLogMetadataManagerConfig
from tiercel.tiered.rsm.remote_storage_manager import RemoteStorageError

TOPIC_ID = uuid.UUID("0102030405060708090a0b0c0d0e0f10")
NAME = REMOTE_LOG_METADATA_TOPIC_NAME
CONFIG = TopicBasedRemoteLogMetadataManagerConfig(
    topic_num_partitions=2, retry_backoff_ms=5, retry_backoff_max_ms=20
)


def _batch(
    base_offset: int, *values: bytes | None, compression: CompressionType = CompressionType.NONE
) -> bytes:
    return build_record_batch(
        [SimpleRecord(None, v) for v in values], base_offset=base_offset, compression=compression
    )


def _control_batch(base_offset: int) -> bytes:
    # An abort marker: key version 0, type 0; value version 0, coordinator epoch 0.
    return build_record_batch(
        [SimpleRecord(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
        base_offset=base_offset,
        producer_id=5,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )


# -- requests ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 9, 11])
def test_the_produce_request_encodes_as_kafkas(version: int) -> None:
    batch = _batch(0, b"v")
    frame = b"".join(encode_request(0, version, 7, "c", produce_request(1, batch, 30_000)))
    header_size = 4 + 2 + 2 + 4 + 2 + 1 + (1 if version >= 9 else 0)
    request = decode_request_body(request_class(0, version), frame, header_size)
    assert request.acks == -1
    assert request.transactional_id is None
    (topic,) = request.topic_data
    assert topic.name == NAME
    (data,) = topic.partition_data
    assert (data.index, bytes(data.records)) == (1, batch)


@pytest.mark.parametrize("version", [12, 13, 17])
def test_the_fetch_request_is_a_consumers(version: int) -> None:
    body = fetch_request(TOPIC_ID, 1, 42, 500)
    frame = b"".join(encode_request(1, version, 7, "c", body))
    request = decode_request_body(request_class(1, version), frame, 4 + 2 + 2 + 4 + 2 + 1 + 1)
    assert request.max_wait == 500 or request.max_wait.total_seconds() == 0.5
    assert request.isolation_level == 0
    (topic,) = request.topics
    if version >= 13:
        assert topic.topic_id == TOPIC_ID
    else:
        assert topic.topic == NAME
    (partition,) = topic.partitions
    assert (partition.partition, partition.fetch_offset) == (1, 42)
    replica = request.replica_state.replica_id if version >= 15 else request.replica_id
    assert replica == -1


# -- responses -----------------------------------------------------------------------------


def _produce_response(error: ErrorCode, base_offset: int = -1) -> Any:
    return build_entity(
        response_class(0, 11),
        {
            "responses": [
                {
                    "name": NAME,
                    "partition_responses": [
                        {"index": 1, "error_code": error, "base_offset": base_offset}
                    ],
                }
            ]
        },
        fill_missing=True,
    )


def test_parse_produce_response() -> None:
    assert parse_produce_response(_produce_response(ErrorCode.none, 41), 1) == 41
    with pytest.raises(RemoteStorageError, match="invalid_record"):
        parse_produce_response(_produce_response(ErrorCode.invalid_record), 1)


def _fetch_response(
    error: ErrorCode, records: bytes, high_watermark: int, log_start: int = 0, version: int = 13
) -> Any:
    return build_entity(
        response_class(1, version),
        {
            "responses": [
                {
                    "topic": NAME,
                    "topic_id": TOPIC_ID,
                    "partitions": [
                        {
                            "partition_index": 1,
                            "error_code": error,
                            "high_watermark": high_watermark,
                            "log_start_offset": log_start,
                            "records": records,
                        }
                    ],
                }
            ]
        },
        fill_missing=True,
    )


def test_parse_fetch_response_returns_the_records_from_the_offset() -> None:
    records = (
        _batch(0, b"a", b"b", b"c", compression=CompressionType.GZIP)
        + _control_batch(3)
        + _batch(4, None, b"e")
    )
    fetched = parse_fetch_response(_fetch_response(ErrorCode.none, records, 6), 13, TOPIC_ID, 1, 1)
    assert fetched == MetadataFetch([(1, b"b"), (2, b"c"), (5, b"e")], 6, 6)


def test_a_fetch_below_the_log_start_moves_to_it() -> None:
    response = _fetch_response(ErrorCode.offset_out_of_range, b"", 90, log_start=40)
    assert parse_fetch_response(response, 13, TOPIC_ID, 1, 0) == MetadataFetch([], 40, 90)


def test_a_fetch_error_is_raised() -> None:
    response = _fetch_response(ErrorCode.not_leader_or_follower, b"", -1)
    with pytest.raises(Exception, match="not_leader_or_follower"):
        parse_fetch_response(response, 13, TOPIC_ID, 1, 0)


def test_records_stop_at_the_high_watermark_and_a_truncated_tail() -> None:
    data = _batch(0, b"a") + _batch(1, b"b") + _batch(2, b"c")[:30]
    assert metadata_fetch_from_records(data, 0, 2) == MetadataFetch([(0, b"a"), (1, b"b")], 2, 2)
    assert metadata_fetch_from_records(data, 0, 1) == MetadataFetch([(0, b"a")], 1, 1)
    assert metadata_fetch_from_records(b"", 5, 5) == MetadataFetch([], 5, 5)


def test_a_corrupt_batch_raises() -> None:
    data = bytearray(_batch(0, b"a"))
    data[-1] ^= 0xFF
    with pytest.raises(RemoteStorageError, match="corrupt"):
        metadata_fetch_from_records(bytes(data), 0, 1)


# -- the client ----------------------------------------------------------------------------


class ScriptedClient:
    """A connection to broker ``target_id`` answering from a script: each entry is a
    response entity or an exception to raise; once the script is done, the broker is
    gone."""

    def __init__(self, target_id: int, script: list[Any]) -> None:
        self.target_id = target_id
        self.script = script
        self.requests: list[tuple[int, Mapping[str, Any]]] = []
        self.closed = False

    async def request(
        self, api_key: int, versions: tuple[int, int], body: dict[str, Any]
    ) -> tuple[int, Any]:
        self.requests.append((api_key, body))
        if not self.script:
            raise ConnectionRefusedError(f"broker {self.target_id} is gone")
        answer = self.script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return versions[1] if api_key == 0 else 13, answer

    def close(self) -> None:
        self.closed = True


class NoLocalReplicas:
    """This broker leads no metadata partition, or answers as a former leader."""

    partitions: dict[TopicPartition, Any] = {}

    def __init__(self) -> None:
        self.appends = 0

    async def append_records(
        self, *args: Any, **kwargs: Any
    ) -> dict[TopicPartition, ProduceResult]:
        self.appends += 1
        tp = TopicPartition(NAME, 1)
        return {tp: ProduceResult(NotLeaderOrFollowerError("moved"))}

    async def fetch_messages(self, *args: Any, **kwargs: Any) -> list[Any]:
        raise AssertionError("no local fetch expected")


def _cache(leader: int, partitions: int = 2) -> MetadataCache:
    cache = MetadataCache(node_id=1, cluster_id="c")
    _set_leader(cache, leader, partitions)
    return cache


def _set_leader(cache: MetadataCache, leader: int, partitions: int = 2) -> None:
    replicas = {p: (1, 2, 3) for p in range(partitions)}
    states = {p: PartitionState(leader, 5, (1, 2, 3), (1, 2, 3)) for p in range(partitions)}
    cache.put_topic(TopicMetadata(NAME, TOPIC_ID, replicas, states))


def _topic(
    cache: MetadataCache, scripts: dict[int, list[Any]], replicas: Any = None
) -> tuple[BrokerRemoteLogMetadataTopic, list[ScriptedClient]]:
    made: list[ScriptedClient] = []

    def factory(leader: int) -> ScriptedClient:
        client = ScriptedClient(leader, scripts[leader])
        made.append(client)
        return client

    topic = BrokerRemoteLogMetadataTopic(
        1,
        replicas or NoLocalReplicas(),
        cache,
        None,
        factory,
        CONFIG,  # type: ignore[arg-type]
    )
    return topic, made


async def test_produce_follows_the_leader_when_it_moves() -> None:
    cache = _cache(leader=2)
    scripts = {
        2: [ConnectionResetError("gone"), _produce_response(ErrorCode.not_leader_or_follower)],
        3: [_produce_response(ErrorCode.none, 7)],
    }
    topic, made = _topic(cache, scripts)

    async def move_when_refused() -> None:
        while scripts[2]:
            await asyncio.sleep(0.001)
        _set_leader(cache, 3)

    mover = asyncio.create_task(move_when_refused())
    assert await topic.produce(1, b"event") == 7
    await mover

    assert made[0].target_id == 2 and made[0].closed
    assert made[-1].target_id == 3 and not made[-1].closed
    (api_key, body) = made[-1].requests[0]
    assert api_key == 0 and body["acks"] == -1
    (batch,) = [p["records"] for t in body["topic_data"] for p in t["partition_data"]]
    assert metadata_fetch_from_records(batch, 0, 1).records == [(0, b"event")]


async def test_a_local_leader_that_moved_away_is_retried_remotely() -> None:
    cache = _cache(leader=1)
    local = NoLocalReplicas()
    topic, _ = _topic(cache, {2: [_produce_response(ErrorCode.none, 3)]}, local)

    async def move() -> None:
        while not local.appends:
            await asyncio.sleep(0.001)
        _set_leader(cache, 2)

    mover = asyncio.create_task(move())
    assert await topic.produce(1, b"x") == 3
    await mover
    assert local.appends == 1


async def test_a_non_retriable_produce_error_raises() -> None:
    topic, _ = _topic(_cache(leader=2), {2: [_produce_response(ErrorCode.invalid_record)]})
    with pytest.raises(RemoteStorageError, match="invalid_record"):
        await topic.produce(1, b"x")


async def test_fetch_through_the_remote_leader() -> None:
    records = _batch(10, b"a", b"b")
    scripts = {2: [_fetch_response(ErrorCode.none, records, 12), ConnectionResetError("x")]}
    topic, made = _topic(_cache(leader=2), scripts)

    assert await topic.fetch(1, 11, 100) == MetadataFetch([(11, b"b")], 12, 12)
    (api_key, body) = made[0].requests[0]
    assert api_key == 1 and body["topics"][0]["topic_id"] == TOPIC_ID
    # A lost connection is the consumer's to retry, after its backoff.
    with pytest.raises(RemoteStorageError):
        await topic.fetch(1, 12, 100)


async def test_an_existing_topic_with_another_partition_count_is_refused() -> None:
    topic, _ = _topic(_cache(leader=2, partitions=3), {})
    with pytest.raises(MetadataTopicMismatchError, match="3 partitions"):
        await topic.ensure_topic()


async def test_an_existing_topic_without_leaders_is_enough_to_start() -> None:
    cache = _cache(leader=-1)
    topic, _ = _topic(cache, {})
    await topic.ensure_topic()  # produce and fetch wait for leaders, as Kafka's clients do


async def test_a_connection_closed_mid_response_is_retried() -> None:
    # What BrokerClient raises when the leader dies between request and response.
    eof = asyncio.IncompleteReadError(b"", 4)
    topic, _ = _topic(_cache(leader=2), {2: [eof, _produce_response(ErrorCode.none, 5)]})
    assert await topic.produce(1, b"x") == 5
