"""ForwardingManager against a scripted controller on a local socket: the client's
request goes unchanged inside an Envelope with the client's principal and address, the
controller's response comes back as it is, and failures become the error to answer
with (every forwarded API's error response is tested in
tests/unit/protocol/test_error_responses.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from kio.schema.default_principal_data.v0.data import DefaultPrincipalData

from support.scripted_broker import ScriptedLeader
from tiercel.protocol.client_frames import encode_request
from tiercel.protocol.entities import (
    decode_request_body,
    request_class,
)
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.request_header import parse_request_header
from tiercel.server.forwarding_manager import (
    CREATE_TOPICS,
    ForwardingManager,
    serialize_principal,
)
from tiercel.server.node_to_controller_channel import ControllerInformation, NodeToControllerChannel

ENVELOPE = 58
CREATE_TOPICS_BODY = {
    "topics": [
        {
            "name": "t",
            "num_partitions": 3,
            "replication_factor": 1,
            "assignments": [],
            "configs": [],
        }
    ],
    "timeout_ms": 1000,
}


@pytest.fixture
async def controller() -> AsyncIterator[ScriptedLeader]:
    scripted = ScriptedLeader({ENVELOPE: (0, 0)})
    scripted.server = await asyncio.start_server(scripted.serve, "127.0.0.1", 0)
    yield scripted
    scripted.server.close()
    await scripted.server.wait_closed()


def forwarding_to(controller: ScriptedLeader, retry_timeout_s: float = 5.0) -> ForwardingManager:
    host, port = controller.endpoint
    info = ControllerInformation(3000, host, port)
    channel = NodeToControllerChannel(lambda: info, "broker-1", 5.0, 0.02)
    return ForwardingManager(channel, retry_timeout_s)


def client_frame() -> bytes:
    chunks = encode_request(CREATE_TOPICS, 7, 42, "client-a", CREATE_TOPICS_BODY)
    return b"".join(bytes(c) for c in chunks)[4:]  # without the size prefix


async def test_the_request_travels_in_an_envelope_and_the_answer_back(
    controller: ScriptedLeader,
) -> None:
    controller.answers[ENVELOPE] = {"error_code": 0, "response_data": b"controller's answer"}
    forwarding = forwarding_to(controller)
    frame = client_frame()
    answer = await forwarding.forward(frame, "10.1.2.3:5555", ("User", "alice"))
    assert not isinstance(answer, ErrorCode)
    assert b"".join(bytes(b) for b in answer) == len(b"controller's answer").to_bytes(4, "big") + (
        b"controller's answer"
    )
    [(_, _, envelope)] = [r for r in controller.requests if r[0] == ENVELOPE]
    assert envelope.request_data == frame
    assert envelope.client_host_address == bytes([10, 1, 2, 3])
    assert envelope.request_principal[:2] == b"\x00\x00"  # DefaultPrincipalData v0
    assert envelope.request_principal == serialize_principal("User", "alice")
    # The inner request is the client's, correlation id included.
    header = parse_request_header(envelope.request_data, True)
    inner = decode_request_body(request_class(CREATE_TOPICS, 7), envelope.request_data, header.size)
    assert header.correlation_id == 42 and inner.topics[0].name == "t"
    forwarding.close()


async def test_failures_become_the_error_to_answer(controller: ScriptedLeader) -> None:
    controller.answers[ENVELOPE] = {"error_code": 35, "response_data": None}  # UNSUPPORTED_VERSION
    forwarding = forwarding_to(controller)
    assert await forwarding.forward(client_frame(), "[::1]:1", ("User", "a")) == (
        ErrorCode.unsupported_version
    )
    forwarding.close()
    nowhere = ForwardingManager(NodeToControllerChannel(lambda: None, "b", 5.0, 0.02), 0.1)
    assert await nowhere.forward(client_frame(), "127.0.0.1:1", ("User", "a")) == (
        ErrorCode.request_timed_out
    )


def test_the_principal_is_kafkas_default_principal_data() -> None:
    data = serialize_principal("User", "bob")
    # version 0, compact "User", compact "bob", false, no tagged fields
    assert data == b"\x00\x00" + b"\x05User" + b"\x04bob" + b"\x00" + b"\x00"
    assert DefaultPrincipalData.__version__ == 0
