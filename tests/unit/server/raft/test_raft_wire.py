"""The Raft RPCs at the wire's edge: a request of an older version reaches the client in
the latest one and is answered in its own; a controller listener answers ApiVersions
with Kafka 4.0's versions and closes a connection that asks for another."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest
from raft_client_context import CLUSTER_ID, RaftClientTestContext
from raft_rpcs import TP

from tiercel.protocol.client_frames import decode_response, encode_request
from tiercel.protocol.entities import build_entity, request_class, response_class
from tiercel.server.network.connection import CloseConnection, Connection
from tiercel.server.raft.raft_apis import RaftApis
from tiercel.server.raft.raft_request_handler import handle_raft_request, is_raft_request
from tiercel.server.raft.raft_wire import request_to_latest, request_to_version

VOTE_V0 = {
    "cluster_id": CLUSTER_ID,
    "topics": [
        {
            "topic_name": TP.topic,
            "partitions": [
                {
                    "partition_index": 0,
                    "replica_epoch": 1,
                    "replica_id": 2,
                    "last_offset_epoch": 0,
                    "last_offset": 0,
                }
            ],
        }
    ],
}


def test_an_old_request_reaches_the_client_in_the_latest_version_and_back() -> None:
    old = build_entity(request_class(52, 0), VOTE_V0)
    latest = request_to_latest(52, old)
    assert type(latest) is request_class(52, 2)
    partition = latest.topics[0].partitions[0]
    assert (partition.replica_epoch, partition.replica_id, partition.pre_vote) == (1, 2, False)
    assert request_to_version(52, latest, 0) == old


def test_the_versions_served_are_kafka_4_0s() -> None:
    assert is_raft_request(52, 2) and not is_raft_request(52, 3)
    assert is_raft_request(1, 4) and is_raft_request(1, 17) and not is_raft_request(1, 3)
    assert is_raft_request(55, 2) and is_raft_request(59, 1) and not is_raft_request(3, 0)


async def test_a_dispatcher_gets_the_answer_in_the_version_asked() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    request = build_entity(request_class(52, 0), VOTE_V0)
    task = asyncio.ensure_future(handle_raft_request(ctx.client, 52, 0, 7, request, "CONTROLLER"))
    await asyncio.sleep(0)
    await ctx.poll_until_idle()
    response = await task
    assert type(response) is response_class(52, 0)
    assert response.topics[0].partitions[0].vote_granted


def _connection() -> Connection:
    return cast(Connection, SimpleNamespace(listener_name="CONTROLLER", client_address="peer"))


async def test_the_controller_listener_answers_api_versions() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    apis = RaftApis(ctx.client)
    frame = b"".join(
        encode_request(
            18, 3, 11, "peer", {"client_software_name": "t", "client_software_version": "1"}
        )
    )
    response = await apis.handle_frame(_connection(), frame[4:])
    assert response is not None
    correlation_id, body = decode_response(b"".join(response)[4:], 18, 3)
    versions = {a.api_key: (a.min_version, a.max_version) for a in body.api_keys}
    assert correlation_id == 11 and body.error_code == 0
    assert versions == {
        1: (4, 18),
        18: (0, 4),
        52: (0, 2),
        53: (0, 1),
        54: (0, 1),
        55: (0, 2),
        59: (0, 1),
    }


async def test_the_controller_listener_closes_on_an_api_it_does_not_serve() -> None:
    ctx = await RaftClientTestContext(1, [1, 2, 3]).start()
    apis = RaftApis(ctx.client)
    body: dict[str, Any] = {
        "topics": [],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    frame = b"".join(encode_request(3, 12, 1, "peer", body))
    with pytest.raises(CloseConnection):
        await apis.handle_frame(_connection(), frame[4:])
