"""RemoteLeaderEndPoint over BrokerClient against a scripted leader on a local socket:
version negotiation, the request fields a follower sends (replica id, ReplicaState,
topic names or ids), decoding of the answers, and reconnecting after a failure."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from support.scripted_broker import ScriptedLeader
from tiercel.protocol.errors import ErrorCode
from tiercel.server.replication.broker_client import BrokerClient, BrokerUnavailableError, Endpoint
from tiercel.server.replication.fetch_state import (
    EpochEndOffset,
    FetchPartition,
    FetchPartitionData,
)
from tiercel.server.replication.remote_leader_end_point import FetcherConfig, RemoteLeaderEndPoint
from tiercel.storage.topic_partition import TopicPartition

TOPIC_ID = uuid.UUID("0d4b1c8e-1f5e-4c39-9a57-4a1de1b7e5a2")
TP = TopicPartition("t", 0)


@pytest.fixture
async def leader() -> AsyncIterator[ScriptedLeader]:
    scripted = ScriptedLeader({1: (4, 17), 2: (1, 8), 23: (2, 4)})
    scripted.server = await asyncio.start_server(scripted.serve, "127.0.0.1", 0)
    yield scripted
    scripted.server.close()
    await scripted.server.wait_closed()


def end_point(leader: ScriptedLeader, resolve: Any = None) -> RemoteLeaderEndPoint:
    client = BrokerClient(2, resolve or (lambda: leader.endpoint), "follower-7", 5.0)
    return RemoteLeaderEndPoint(client, FetcherConfig(7, 500, 1, 10 << 20))


def fetch_partition() -> dict[TopicPartition, FetchPartition]:
    return {TP: FetchPartition(TOPIC_ID, 0, 42, 3, 2, 5, 1 << 20)}


async def test_fetch_sends_replica_state_and_topic_ids_and_decodes_the_answer(
    leader: ScriptedLeader,
) -> None:
    leader.answers[1] = {
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic_id": TOPIC_ID,
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 40,
                        "log_start_offset": 5,
                        "diverging_epoch": {"epoch": 1, "end_offset": 30},
                        "records": b"",
                    }
                ],
            }
        ],
    }
    remote = end_point(leader)
    answer = await remote.fetch(fetch_partition())
    assert answer == {TP: FetchPartitionData(ErrorCode.none, 40, 5, b"", (1, 30))}
    api_key, version, request = leader.requests[-1]
    assert (api_key, version) == (1, 17)
    assert request.replica_state.replica_id == 7
    assert (request.max_wait.total_seconds(), request.min_bytes, request.max_bytes) == (
        0.5,
        1,
        10 << 20,
    )
    (topic,) = request.topics
    (p,) = topic.partitions
    assert topic.topic_id == TOPIC_ID
    assert (p.fetch_offset, p.current_leader_epoch, p.last_fetched_epoch, p.log_start_offset) == (
        42,
        3,
        2,
        5,
    )
    remote.close()


async def test_an_older_leader_gets_topic_names_and_the_replica_id_field(
    leader: ScriptedLeader,
) -> None:
    leader.versions[1] = (4, 12)
    leader.answers[1] = {
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {"partition_index": 0, "error_code": 1, "high_watermark": -1, "records": None}
                ],
            }
        ],
    }
    remote = end_point(leader)
    answer = await remote.fetch(fetch_partition())
    assert answer == {TP: FetchPartitionData(ErrorCode.offset_out_of_range, -1, -1, b"", None)}
    _, version, request = leader.requests[-1]
    assert version == 12 and request.replica_id == 7
    assert request.topics[0].topic == "t"
    remote.close()


async def test_offset_for_leader_epoch_and_list_offsets(leader: ScriptedLeader) -> None:
    leader.answers[23] = {
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {"partition": 0, "error_code": 0, "leader_epoch": 2, "end_offset": 50}
                ],
            }
        ]
    }
    leader.answers[2] = {
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "error_code": 0, "offset": 77, "timestamp": -1}
                ],
            }
        ]
    }
    remote = end_point(leader)
    assert await remote.fetch_epoch_end_offsets({TP: (4, 2)}) == {
        TP: EpochEndOffset(ErrorCode.none, 2, 50)
    }
    _, version, request = leader.requests[-1]
    assert version == 4 and request.replica_id == 7
    assert request.topics[0].partitions[0].current_leader_epoch == 4
    assert await remote.fetch_latest_offset(TP, 4) == (ErrorCode.none, 77)
    _, _, request = leader.requests[-1]
    assert request.replica_id == 7 and request.topics[0].partitions[0].timestamp == -1
    assert await remote.fetch_earliest_offset(TP, 4) == (ErrorCode.none, 77)
    assert leader.requests[-1][2].topics[0].partitions[0].timestamp == -2
    assert leader.connections == 1  # one connection, one ApiVersions
    remote.close()


async def test_failures_close_the_connection_and_the_next_request_reconnects(
    leader: ScriptedLeader,
) -> None:
    where: list[Endpoint | None] = [None]
    remote = end_point(leader, lambda: where[0])
    with pytest.raises(BrokerUnavailableError):
        await remote.fetch_latest_offset(TP, 0)
    where[0] = leader.endpoint
    leader.answers[2] = {"topics": []}  # the partition is missing from the answer
    assert await remote.fetch_latest_offset(TP, 0) == (ErrorCode.unknown_topic_or_partition, -1)
    del leader.answers[2]  # the scripted leader fails on the next one and hangs up
    with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
        await remote.fetch_latest_offset(TP, 0)
    leader.answers[2] = {"topics": []}
    await remote.fetch_latest_offset(TP, 0)
    assert leader.connections == 2
    remote.close()
