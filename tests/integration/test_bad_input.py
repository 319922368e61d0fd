"""Bad input never crashes the broker or loses data.

Every case is sent on a raw socket (support.wire) to one broker shared by the module,
and gets exactly what Apache Kafka gives it: an error code in a properly decoded
response, or the connection closed by the server with a log line naming the client's
``ip:port``. After each case a connection opened before the bad one and a new one are
still served, and the records produced at start-up are still there, unchanged; the last
test checks the process never died and still shuts down cleanly on SIGTERM.
"""

from __future__ import annotations

import datetime
import os
import random
import re
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import crc32c
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from support.broker import BrokerProcess, assert_no_unexpected_errors, unexpected_errors
from support.wire import (
    ConnectionClosedError,
    WireClient,
    decode_response,
    encode_header,
    encode_request,
    size_prefixed,
)
from tiercel.protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    read_header,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.records import decode_records

MAX_REQUEST = 1024 * 1024  # socket.request.max.bytes for this module's broker
SMALL_MAX_MESSAGE = 16 * 1024  # max.message.bytes of SMALL
INTACT = "intact"  # baseline records; only rejected produces are aimed at it
SMALL = "small-max-message"
TRAFFIC = "traffic"  # valid traffic from the tests
SCRATCH = "scratch"  # where a known broker bug appends what Kafka rejects
BASELINE = [SimpleRecord(b"k%d" % i, b"base-%d" % i, timestamp=None) for i in range(10)]


# -- requests -------------------------------------------------------------------------


def millis(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def metadata_request(*topics: str) -> MetadataRequest:
    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def produce_request(topic: str, records: bytes | None, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(
        acks=i16(acks),
        timeout=millis(10_000),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=(
                    PartitionProduceData(
                        index=i32(0), records=None if records is None else Records(records)
                    ),
                ),
            ),
        ),
    )


def list_offsets_request(topic: str) -> ListOffsetsRequest:
    return ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=i8(0),
        topics=(
            ListOffsetsTopic(
                name=TopicName(topic),
                partitions=(ListOffsetsPartition(partition_index=i32(0), timestamp=i64(-1)),),
            ),
        ),
    )


def fetch_request(topic: str, offset: int) -> FetchRequest:
    return FetchRequest(
        max_wait=millis(0),
        min_bytes=i32(0),
        topics=(
            FetchTopic(
                topic=TopicName(topic),
                partitions=(
                    FetchPartition(
                        partition=i32(0), fetch_offset=i64(offset), partition_max_bytes=i32(1 << 20)
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def produce(client: WireClient, topic: str, records: bytes, acks: int = -1) -> tuple[int, int]:
    """(error code, base offset) of a one-partition produce."""
    response = client.request(produce_request(topic, records, acks))
    (partition,) = response.responses[0].partition_responses
    return int(partition.error_code), int(partition.base_offset)


def latest_offset(client: WireClient, topic: str) -> int:
    response = client.request(list_offsets_request(topic))
    (partition,) = response.topics[0].partitions
    assert partition.error_code == ErrorCode.none
    return int(partition.offset)


def batch(*values: bytes) -> bytes:
    return build_record_batch(SimpleRecord(b"key", v) for v in values)


# -- batches that lie -----------------------------------------------------------------


def with_crc(data: bytearray) -> bytes:
    """Recompute the CRC so the lie is not caught by the checksum first."""
    struct.pack_into(">I", data, CRC_OFFSET, crc32c.crc32c(bytes(data[ATTRIBUTES_OFFSET:])))
    return bytes(data)


def patched(data: bytes, offset: int, fmt: str, value: int, fix_crc: bool) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return with_crc(out) if fix_crc else bytes(out)


def legacy_message_set(magic: int) -> bytes:
    """One uncompressed message in the pre-0.11 format (magic 0 or 1):

    offset int64, size int32, crc int32 (CRC-32 of magic..end), magic int8,
    attributes int8, [timestamp int64 if magic 1], key bytes, value bytes
    """
    body = struct.pack(">bb", magic, 0)
    if magic == 1:
        body += struct.pack(">q", int(time.time() * 1000))
    body += struct.pack(">i", 3) + b"key" + struct.pack(">i", 5) + b"value"
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


# -- the broker -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("bad-input"), {"socket.request.max.bytes": MAX_REQUEST}
    )
    broker.start()
    try:
        with WireClient(broker.bootstrap) as client:
            create_topics(client)
            error, base = produce(client, INTACT, build_record_batch(BASELINE))
            assert (error, base) == (0, 0)
        yield broker
    finally:
        broker.kill()
    assert_no_unexpected_errors([broker])


def create_topics(client: WireClient) -> None:
    small = (CreatableTopicConfig(name="max.message.bytes", value=str(SMALL_MAX_MESSAGE)),)
    response = client.request(
        CreateTopicsRequest(
            topics=tuple(
                CreatableTopic(
                    name=TopicName(name),
                    num_partitions=i32(1),
                    replication_factor=i16(1),
                    assignments=(),
                    configs=configs,
                )
                for name, configs in ((INTACT, ()), (SMALL, small), (TRAFFIC, ()), (SCRATCH, ()))
            ),
            timeout=millis(10_000),
            validate_only=False,
        )
    )
    assert [(t.name, t.error_code) for t in response.topics] == [
        (INTACT, ErrorCode.none),
        (SMALL, ErrorCode.none),
        (TRAFFIC, ErrorCode.none),
        (SCRATCH, ErrorCode.none),
    ]


@pytest.fixture(scope="module")
def early(server: BrokerProcess) -> Iterator[WireClient]:
    """A connection opened before any bad input; it must be served throughout."""
    with WireClient(server.bootstrap) as client:
        yield client


@pytest.fixture
def before(server: BrokerProcess, early: WireClient) -> Iterator[WireClient]:
    """A connection opened by the test before its bad one."""
    with WireClient(server.bootstrap) as client:
        assert_served(client)
        yield client
    assert_served(early)
    assert latest_offset(early, INTACT) == len(BASELINE), "rejected input was appended"
    with WireClient(server.bootstrap) as after:
        assert_served(after)


def assert_served(client: WireClient) -> None:
    response = client.request(metadata_request(INTACT))
    (topic,) = response.topics
    assert (topic.name, topic.error_code, len(topic.partitions)) == (INTACT, ErrorCode.none, 1)


def log_lines(broker: BrokerProcess, client: WireClient) -> list[str]:
    """The broker's log lines naming this client's ip:port."""
    pattern = re.compile(rf"^.*\bclient={re.escape(client.address)}(?:\s.*)?$", re.MULTILINE)
    return pattern.findall(broker.log_text())


def log_line(broker: BrokerProcess, client: WireClient, timeout: float = 5.0) -> str:
    """The first log line naming this client (waits for it to be written)."""
    deadline = time.monotonic() + timeout
    while not (lines := log_lines(broker, client)):
        if time.monotonic() > deadline:
            raise AssertionError(f"no log line names client {client.address}:\n{broker.tail()}")
        time.sleep(0.05)
    return lines[0]


def assert_closed_and_logged(broker: BrokerProcess, client: WireClient, event: str) -> str:
    assert client.closed_by_server(5.0), "the broker left the connection open"
    line = log_line(broker, client)
    assert f"event={event} " in line, line
    return line


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# -- framing --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_garbage_closes_the_connection(
    server: BrokerProcess, before: WireClient, seed: int
) -> None:
    garbage = random.Random(seed).randbytes(512)
    with WireClient(server.bootstrap) as bad:
        bad.send_raw(garbage)
        assert_closed_and_logged(server, bad, "invalid_request_size")


def test_http_request_closes_the_connection(server: BrokerProcess, before: WireClient) -> None:
    # "GET " read as a size prefix is 1.19 GB: far over socket.request.max.bytes.
    with WireClient(server.bootstrap) as bad:
        bad.send_raw(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        line = assert_closed_and_logged(server, bad, "invalid_request_size")
        assert f"size={int.from_bytes(b'GET ', 'big')} " in line


def test_framed_garbage_with_an_unknown_api_key_closes_the_connection(
    server: BrokerProcess, before: WireClient
) -> None:
    payload = struct.pack(">hhi", 9999, 0, 1) + random.Random(7).randbytes(120)
    with WireClient(server.bootstrap) as bad:
        bad.send_raw(size_prefixed(payload))
        line = assert_closed_and_logged(server, bad, "unknown_api_key")
        assert "api_key=9999 " in line


_METADATA_V12 = struct.pack(">hhi", 3, 12, 1)
UNDECODABLE: list[tuple[str, bytes, str]] = [
    ("shorter-than-a-header", b"\x00\x03\x00", "invalid_request_header"),
    ("client-id-length-minus-two", _METADATA_V12 + struct.pack(">h", -2), "invalid_request"),
    ("client-id-past-the-end", _METADATA_V12 + struct.pack(">h", 500) + b"abc", "invalid_request"),
    ("header-tagged-fields-past-the-end", _METADATA_V12 + b"\xff\xff\x01\x05", "invalid_request"),
    (
        "body-of-0xff",
        encode_header(3, 12, 1, "garbage", flexible=True) + b"\xff" * 40,
        "invalid_request",
    ),
]


@pytest.mark.parametrize(
    ("payload", "event"), [pytest.param(p, e, id=name) for name, p, e in UNDECODABLE]
)
def test_undecodable_request_closes_the_connection(
    server: BrokerProcess, before: WireClient, payload: bytes, event: str
) -> None:
    with WireClient(server.bootstrap) as bad:
        bad.send_raw(size_prefixed(payload))
        assert_closed_and_logged(server, bad, event)


def test_inner_length_running_past_the_frame_closes_the_connection(
    server: BrokerProcess, before: WireClient
) -> None:
    # A Produce whose records field claims more bytes than the frame holds.
    frame = encode_request(produce_request(TRAFFIC, batch(b"v")), 1)
    payload = frame[4:-40]
    with WireClient(server.bootstrap) as bad:
        bad.send_raw(size_prefixed(payload))
        assert_closed_and_logged(server, bad, "invalid_request")


@pytest.mark.parametrize(
    "size",
    [-1, -(2**31), 2**31 - 1, MAX_REQUEST + 1],
    ids=["minus-one", "int32-min", "int32-max", "max-plus-one"],
)
def test_bad_size_prefix_closes_at_once_without_reading_a_body(
    server: BrokerProcess, before: WireClient, size: int
) -> None:
    assert server.proc is not None
    rss_before = vm_rss_kib(server.proc.pid)
    with WireClient(server.bootstrap) as bad:
        bad.send_raw(struct.pack(">i", size))  # the 4 bytes only: no body follows
        line = assert_closed_and_logged(server, bad, "invalid_request_size")
    assert f"size={size} max={MAX_REQUEST}" in line
    # Nothing the size of the claimed frame was allocated for it.
    assert vm_rss_kib(server.proc.pid) - rss_before < 64 * 1024


def test_size_prefix_at_the_limit_is_accepted_and_awaits_its_body(
    server: BrokerProcess, before: WireClient
) -> None:
    with WireClient(server.bootstrap) as slow:
        slow.send_raw(struct.pack(">i", MAX_REQUEST))
        assert not slow.closed_by_server(0.5)
        assert_served(before)


def test_truncated_frame_then_half_close_is_closed(
    server: BrokerProcess, before: WireClient
) -> None:
    frame = encode_request(metadata_request(INTACT), 1)
    with WireClient(server.bootstrap) as bad:
        bad.send_raw(frame[: len(frame) // 2])
        bad.sock.shutdown(socket.SHUT_WR)
        assert bad.closed_by_server(5.0)
        with pytest.raises(ConnectionClosedError):
            bad.read_frame()


def test_truncated_frame_then_half_close_is_logged(
    server: BrokerProcess, before: WireClient
) -> None:
    frame = encode_request(metadata_request(INTACT), 1)
    with WireClient(server.bootstrap) as bad:
        bad.send_raw(frame[: len(frame) // 2])
        bad.sock.shutdown(socket.SHUT_WR)
        assert bad.closed_by_server(5.0)
        log_line(server, bad, timeout=1.0)


def test_whole_request_then_half_close_is_answered_then_closed(
    server: BrokerProcess, before: WireClient
) -> None:
    # The half-closing client still gets the answers to what it sent (Kafka does too).
    with WireClient(server.bootstrap) as client:
        correlation_id = client.send(metadata_request(INTACT))
        client.sock.shutdown(socket.SHUT_WR)
        got, response = client.read_response(3, 12)
        assert got == correlation_id and response.topics[0].name == INTACT
        assert client.closed_by_server(5.0)


def test_truncated_frame_left_open_does_not_block_others(
    server: BrokerProcess, before: WireClient
) -> None:
    frame = encode_request(metadata_request(INTACT), 41)
    with WireClient(server.bootstrap) as slow:
        slow.send_raw(frame[:7])  # size prefix and part of the header
        for _ in range(3):
            assert_served(before)
            with WireClient(server.bootstrap) as other:
                assert_served(other)
        assert not slow.closed_by_server(0.2)
        slow.send_raw(frame[7:])  # the rest arrives at last: the request is answered
        got, response = slow.read_response(3, 12)
        assert got == 41 and response.topics[0].name == INTACT


# -- API keys and versions --------------------------------------------------------------


def test_unknown_api_key_closes_the_connection(server: BrokerProcess, before: WireClient) -> None:
    header = encode_header(9999, 0, 5, "unknown-key", flexible=False)
    with WireClient(server.bootstrap) as bad:
        bad.send_raw(size_prefixed(header))
        line = assert_closed_and_logged(server, bad, "unknown_api_key")
        assert "api_key=9999 api_version=0" in line


@pytest.mark.parametrize(
    ("api_key", "api_version"),
    [(3, 99), (3, -1), (1, 3), (0, 99)],
    ids=["metadata-v99", "metadata-v-1", "fetch-v3", "produce-v99"],
)
def test_unsupported_version_of_a_known_api_closes_the_connection(
    server: BrokerProcess, before: WireClient, api_key: int, api_version: int
) -> None:
    header = encode_header(api_key, api_version, 5, "bad-version", flexible=False)
    with WireClient(server.bootstrap) as bad:
        bad.send_raw(size_prefixed(header + b"\x00" * 16))
        line = assert_closed_and_logged(server, bad, "unsupported_api_version")
        assert f"api_key={api_key} api_version={api_version}" in line


def test_api_versions_with_an_unsupported_version_gets_kip_511_answer(
    server: BrokerProcess, before: WireClient
) -> None:
    # The body of an unknown version cannot be parsed and must not be: only the header.
    header = encode_header(18, 99, 1234, "future-client", flexible=True)
    with WireClient(server.bootstrap) as client:
        client.send_raw(size_prefixed(header + b"\x07future body\x00"))
        frame = client.read_frame()
        (correlation_id,) = struct.unpack_from(">i", frame)
        assert correlation_id == 1234
        # The v0 format, header v0 (no tagged fields), whatever version was asked for.
        _, response = decode_response(frame, 18, 0)
        assert isinstance(response, ApiVersionsResponseV0)
        assert response.error_code == ErrorCode.unsupported_version
        assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
            (18, 0, 4)
        ]
        # The connection stays open and the retry with a supported version works.
        retry = client.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert retry.error_code == ErrorCode.none
        assert (0, 0, 11) in [(k.api_key, k.min_version, k.max_version) for k in retry.api_keys]


# -- record batches ---------------------------------------------------------------------


def _flip_value_byte(data: bytes) -> bytes:
    out = bytearray(data)
    out[-2] ^= 0x01
    return bytes(out)


def _two_batches() -> bytes:
    return batch(b"one") + batch(b"two")


def _count(delta: int, fix_last_offset_delta: bool) -> Callable[[bytes], bytes]:
    def lie(data: bytes) -> bytes:
        header = read_header(data)
        out = bytearray(data)
        struct.pack_into(">i", out, RECORDS_COUNT_OFFSET, header.records_count + delta)
        if fix_last_offset_delta:
            struct.pack_into(">i", out, LAST_OFFSET_DELTA_OFFSET, header.last_offset_delta + delta)
        return with_crc(out)

    return lie


def _batch_length(delta: int, fix_crc: bool) -> Callable[[bytes], bytes]:
    def lie(data: bytes) -> bytes:
        length = read_header(data).batch_length
        return patched(data, BATCH_LENGTH_OFFSET, ">i", length + delta, fix_crc)

    return lie


def _truncated_batch(data: bytes) -> bytes:
    # A self-consistent header (length and CRC agree) over records cut short.
    out = bytearray(data[:-3])
    struct.pack_into(">i", out, BATCH_LENGTH_OFFSET, len(out) - 12)
    return with_crc(out)


def _extended_batch(data: bytes) -> bytes:
    # Length and CRC agree, but bytes follow the declared records.
    out = bytearray(data + b"\x00\x00\x00")
    struct.pack_into(">i", out, BATCH_LENGTH_OFFSET, len(out) - 12)
    return with_crc(out)


THREE = batch(b"a", b"bb", b"ccc")

BAD_BATCHES: list[tuple[str, Callable[[], bytes], ErrorCode]] = [
    ("value-byte-flipped", lambda: _flip_value_byte(THREE), ErrorCode.corrupt_message),
    (
        "crc-field-wrong",
        lambda: patched(THREE, CRC_OFFSET, ">I", 0xDEADBEEF, False),
        ErrorCode.corrupt_message,
    ),
    ("count-more-than-records", lambda: _count(+2, True)(THREE), ErrorCode.invalid_record),
    ("count-fewer-than-records", lambda: _count(-1, True)(THREE), ErrorCode.invalid_record),
    (
        "count-disagrees-with-offset-delta",
        lambda: _count(+1, False)(THREE),
        ErrorCode.invalid_record,
    ),
    ("count-zero", lambda: _count(-3, True)(THREE), ErrorCode.invalid_record),
    # Shorter by fewer bytes than a batch header: Kafka sees one batch, CRC mismatch.
    ("length-shorter", lambda: _batch_length(-4, False)(THREE), ErrorCode.corrupt_message),
    (
        "length-below-minimum",
        lambda: patched(THREE, BATCH_LENGTH_OFFSET, ">i", 8, False),
        ErrorCode.corrupt_message,
    ),
    (
        "length-negative",
        lambda: patched(THREE, BATCH_LENGTH_OFFSET, ">i", -1, False),
        ErrorCode.corrupt_message,
    ),
    ("records-truncated", lambda: _truncated_batch(THREE), ErrorCode.invalid_record),
    ("records-trailing-bytes", lambda: _extended_batch(THREE), ErrorCode.invalid_record),
    ("magic-0", lambda: legacy_message_set(0), ErrorCode.invalid_record),
    ("magic-1", lambda: legacy_message_set(1), ErrorCode.invalid_record),
    ("two-batches", _two_batches, ErrorCode.invalid_record),
    ("empty-records", lambda: b"", ErrorCode.invalid_record),
]


@pytest.mark.parametrize(
    ("make", "expected"),
    [pytest.param(make, code, id=name) for name, make, code in BAD_BATCHES],
)
def test_bad_batch_gets_kafkas_error_and_nothing_is_appended(
    server: BrokerProcess, before: WireClient, make: Callable[[], bytes], expected: ErrorCode
) -> None:
    with WireClient(server.bootstrap) as client:
        error, base_offset = produce(client, INTACT, make())
        assert (ErrorCode(error), base_offset) == (expected, -1)
        # Kafka answers with an error code and keeps the connection.
        assert_served(client)
        assert latest_offset(client, INTACT) == len(BASELINE)


def test_batch_length_longer_than_the_data_is_invalid_record(
    server: BrokerProcess, before: WireClient
) -> None:
    with WireClient(server.bootstrap) as client:
        error, _ = produce(client, INTACT, _batch_length(+100, False)(THREE))
        assert ErrorCode(error) == ErrorCode.invalid_record


def test_batch_with_a_nonzero_base_offset_is_invalid_record(
    server: BrokerProcess, before: WireClient
) -> None:
    # Kafka: "The baseOffset of the record batch in the append to ... should be 0".
    with WireClient(server.bootstrap) as client:
        end = latest_offset(client, SCRATCH)
        records = build_record_batch([SimpleRecord(b"k", b"v")], base_offset=5)
        error, _ = produce(client, SCRATCH, records)
        assert ErrorCode(error) == ErrorCode.invalid_record
        assert latest_offset(client, SCRATCH) == end


def test_record_over_max_message_bytes_is_message_too_large(
    server: BrokerProcess, before: WireClient
) -> None:
    with WireClient(server.bootstrap) as client:
        end = latest_offset(client, SMALL)
        error, _ = produce(client, SMALL, batch(b"x" * (SMALL_MAX_MESSAGE + 1)))
        assert ErrorCode(error) == ErrorCode.message_too_large
        assert latest_offset(client, SMALL) == end
        # The same topic takes a record that fits.
        error, base_offset = produce(client, SMALL, batch(b"x" * (SMALL_MAX_MESSAGE // 2)))
        assert (error, base_offset) == (0, end)


def test_bad_batch_with_acks_0_closes_the_connection(
    server: BrokerProcess, before: WireClient
) -> None:
    # With acks=0 the client reads no response: closing is the only way to say "failed".
    with WireClient(server.bootstrap) as client:
        client.send(produce_request(INTACT, _flip_value_byte(THREE), acks=0))
        assert client.closed_by_server(5.0)


def test_bad_batch_with_acks_0_is_logged(server: BrokerProcess, before: WireClient) -> None:
    with WireClient(server.bootstrap) as client:
        client.send(produce_request(INTACT, _flip_value_byte(THREE), acks=0))
        assert client.closed_by_server(5.0)
        log_line(server, client, timeout=1.0)


def test_good_batch_with_acks_0_gets_no_response_and_keeps_the_connection(
    server: BrokerProcess, before: WireClient
) -> None:
    with WireClient(server.bootstrap) as client:
        end = latest_offset(client, TRAFFIC)
        client.send(produce_request(TRAFFIC, batch(b"fire-and-forget"), acks=0))
        # The next response on this connection answers the next request.
        assert latest_offset(client, TRAFFIC) == end + 1


# -- pipelining -------------------------------------------------------------------------


def test_pipelined_requests_are_answered_in_order(
    server: BrokerProcess, before: WireClient
) -> None:
    end = latest_offset(before, TRAFFIC)
    value = b"pipelined-%d" % end
    unsupported = size_prefixed(encode_header(18, 99, 33, "p", flexible=True))
    requests: list[tuple[int, int, bytes]] = [
        (
            901,
            18,
            encode_request(
                ApiVersionsRequest(client_software_name="p", client_software_version="1"), 901
            ),
        ),
        (17, 3, encode_request(metadata_request(TRAFFIC), 17)),
        (5, 0, encode_request(produce_request(TRAFFIC, batch(value), acks=1), 5)),
        (4000, 0, encode_request(produce_request(INTACT, _flip_value_byte(THREE), acks=1), 4000)),
        (33, 18, unsupported),
        (2, 2, encode_request(list_offsets_request(TRAFFIC), 2)),
        (-7, 1, encode_request(fetch_request(TRAFFIC, end), -7)),
    ]
    versions = {18: 3, 3: 12, 0: 9, 2: 7, 1: 12}
    with WireClient(server.bootstrap) as client:
        client.send_raw(b"".join(frame for _, _, frame in requests))
        responses: list[Any] = []
        for correlation_id, api_key, _ in requests:
            version = 0 if correlation_id == 33 else versions[api_key]
            got, response = client.read_response(api_key, version)
            assert got == correlation_id
            responses.append(response)
    api_versions, metadata, good, bad, kip511, offsets, fetched = responses
    assert api_versions.error_code == ErrorCode.none
    assert metadata.topics[0].name == TRAFFIC
    assert good.responses[0].partition_responses[0].base_offset == end
    assert bad.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
    assert kip511.error_code == ErrorCode.unsupported_version
    assert offsets.topics[0].partitions[0].offset == end + 1
    # Strict order: the fetch sees the produce that was pipelined before it.
    records = fetched.responses[0].partitions[0].records
    assert [r.value for r in decode_records(records, 1, RECORDS_OFFSET)] == [value]


def test_pipelined_requests_after_a_fatal_one_are_dropped(
    server: BrokerProcess, before: WireClient
) -> None:
    frames = [
        encode_request(metadata_request(INTACT), 1),
        encode_request(
            ApiVersionsRequest(client_software_name="p", client_software_version="1"), 2
        ),
        size_prefixed(encode_header(9999, 0, 3, "p", flexible=False)),
        encode_request(metadata_request(INTACT), 4),
    ]
    with WireClient(server.bootstrap) as client:
        client.send_raw(b"".join(frames))
        assert client.read_response(3, 12)[0] == 1
        assert client.read_response(18, 3)[0] == 2
        with pytest.raises(ConnectionClosedError):
            client.read_frame()
        log_line(server, client)


# -- many connections -------------------------------------------------------------------


def _half_open(bootstrap: str, count: int) -> list[socket.socket]:
    host, port = bootstrap.rsplit(":", 1)
    partial_frame = encode_request(metadata_request(INTACT), 1)[:20]
    sockets = []
    for i in range(count):
        sock = socket.create_connection((host, int(port)), timeout=10)
        if i % 3 == 1:
            sock.sendall(b"\x00\x00")  # half a size prefix
        elif i % 3 == 2:
            sock.sendall(partial_frame)  # a size prefix and part of the frame
        sockets.append(sock)
    return sockets


def produce_and_consume(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Produce ``values`` through librdkafka and read them back from where they landed."""
    offsets: list[int | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for value in values:
        producer.produce(
            topic,
            value=value,
            on_delivery=lambda err, msg: offsets.append(None if err else msg.offset()),
        )
    assert producer.flush(30) == 0
    landed = [offset for offset in offsets if offset is not None]
    assert len(landed) == len(values), offsets
    assert consume(bootstrap, topic, min(landed), len(values)) == values


def consume(bootstrap: str, topic: str, start: int, count: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bad-input", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, start)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            value = message.value()
            assert value is not None
            values.append(value)
    consumer.close()
    return values


def test_hundreds_of_half_open_connections_do_not_stop_service(
    server: BrokerProcess, before: WireClient
) -> None:
    sockets = _half_open(server.bootstrap, 300)
    try:
        started = time.monotonic()
        produce_and_consume(server.bootstrap, TRAFFIC, [b"busy-%d" % i for i in range(100)])
        assert time.monotonic() - started < 20
        assert_served(before)
        # None of them was closed: they are merely idle, as Kafka would see them.
        for sock in sockets:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in sockets:
            sock.close()


def test_idle_half_open_connections_are_reaped_and_logged(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory({"connections.max.idle.ms": 1000})
    idle = [WireClient(broker.bootstrap) for _ in range(6)]
    idle[1].send_raw(b"\x00\x00")
    idle[2].send_raw(encode_request(metadata_request(), 1)[:9])
    with WireClient(broker.bootstrap) as busy:
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:  # an active client is never idle
            busy.request(metadata_request())
            time.sleep(0.2)
        for client in idle:
            assert client.closed_by_server(5.0)
            assert "event=idle_connection_closed " in log_line(broker, client)
            client.close()
        busy.request(metadata_request())
    assert log_lines(broker, busy) == []


# -- afterwards ---------------------------------------------------------------------------


def test_broker_survived_everything_and_stops_cleanly(
    server: BrokerProcess, early: WireClient
) -> None:
    assert server.running
    assert_served(early)
    produce_and_consume(server.bootstrap, TRAFFIC, [b"after-%d" % i for i in range(20)])
    assert consume(server.bootstrap, INTACT, 0, len(BASELINE)) == [r.value for r in BASELINE]
    assert latest_offset(early, INTACT) == len(BASELINE)
    assert unexpected_errors(server.log_text()) == []
    assert server.stop() == 0
    assert "event=broker_stopped" in server.log_text()
    assert os.path.exists(server.log_dir / ".kafka_cleanshutdown")
