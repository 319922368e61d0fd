"""TransactionMarkerChannelManager against a partition leader on a local socket whose
first WriteTxnMarkers answer cannot be read: a wrong correlation id, then a frame too
short for its header (both FrameError in BrokerClient). The sender logs, backs off and
sends again; the leader's next answer marks the partition and CompleteCommit is
written. Before, any failure other than a network error ended the sending task and left
the transaction in PrepareCommit until its partition was reloaded."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tiercel.config.broker_config import Listener
from tiercel.protocol.entities import (
    ChunkWriter,
    build_entity,
    decode_request_body,
    encode_entity,
    request_class,
    response_class,
)
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.request_header import parse_request_header, peek_api, response_header_bytes
from tiercel.server.coordinator.transaction.transaction_marker_channel import (
    TransactionMarkerChannelManager,
)
from tiercel.server.coordinator.transaction.transaction_metadata import (
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.zk_data import BrokerRegistration
from tiercel.server.partition import PartitionState
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

LEADER = 2
LISTENER = "PLAINTEXT"
TP = TopicPartition("data", 0)
_SIZE = struct.Struct(">i")


class GarblingLeader:
    """Answers ApiVersions, and WriteTxnMarkers with every partition marked; the first
    ``garbled`` WriteTxnMarkers answers are frames BrokerClient cannot read, in turn a
    wrong correlation id and a frame too short for its header."""

    def __init__(self, garbled: int) -> None:
        self.garbled = garbled
        self.markers: list[Any] = []
        self.server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, _ = peek_api(frame)
                request_type = request_class(api_key, version)
                header = parse_request_header(frame, request_type.__flexible__)
                request = decode_request_body(request_type, frame, header.size)
                correlation_id = header.correlation_id
                if api_key == 18:
                    body: dict[str, Any] = {
                        "error_code": 0,
                        "api_keys": [{"api_key": 27, "min_version": 1, "max_version": 1}],
                    }
                else:
                    self.markers.append(request)
                    body = {"markers": [_all_marked(marker) for marker in request.markers]}
                    if self.garbled:
                        self.garbled -= 1
                        if self.garbled % 2:
                            correlation_id += 1
                        else:
                            writer.write(_SIZE.pack(2) + b"\x00\x00")
                            await writer.drain()
                            continue
                writer.write(_response_frame(api_key, version, correlation_id, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _all_marked(marker: Any) -> dict[str, Any]:
    return {
        "producer_id": marker.producer_id,
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {"partition_index": p, "error_code": ErrorCode.none}
                    for p in topic.partition_indexes
                ],
            }
            for topic in marker.topics
        ],
    }


def _response_frame(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    response_type = response_class(api_key, version)
    out = ChunkWriter()
    out.write(
        response_header_bytes(correlation_id, response_type.__header_schema__.__version__ >= 1)
    )
    encode_entity(out, build_entity(response_type, body, fill_missing=True))
    return _SIZE.pack(out.size) + b"".join(bytes(c) for c in out.chunks())


@pytest.fixture
async def leader() -> AsyncIterator[GarblingLeader]:
    garbling = GarblingLeader(garbled=2)
    garbling.server = await asyncio.start_server(garbling.serve, "127.0.0.1", 0)
    yield garbling
    garbling.server.close()
    await garbling.server.wait_closed()


@pytest.fixture
async def scheduler() -> AsyncIterator[Scheduler]:
    s = Scheduler(asyncio.get_running_loop(), 1)
    yield s
    await s.drain()
    s.shutdown()


def metadata_cache(leader: GarblingLeader) -> MetadataCache:
    assert leader.server is not None
    host, port = leader.server.sockets[0].getsockname()[:2]
    cache = MetadataCache(1, "cluster")
    cache.put_brokers({LEADER: BrokerRegistration(LEADER, (Listener(LISTENER, host, port),))})
    cache.put_topic(
        TopicMetadata(
            TP.topic,
            uuid.uuid4(),
            {TP.partition: (LEADER,)},
            {TP.partition: PartitionState(LEADER, 0, (LEADER,), (LEADER,))},
        )
    )
    return cache


def prepared_commit() -> tuple[TransactionMetadata, TxnTransitMetadata]:
    metadata = TransactionMetadata(
        "app", 7, -1, 0, -1, 60_000, TransactionState.PREPARE_COMMIT, {TP}, 1, 2
    )
    return metadata, metadata.prepare_complete(3)


async def test_an_unreadable_answer_is_retried_and_the_transaction_completes(
    leader: GarblingLeader, scheduler: Scheduler
) -> None:
    written: list[TxnTransitMetadata] = []

    async def write_complete(_: str, __: int, transit: TxnTransitMetadata) -> ErrorCode:
        written.append(transit)
        return ErrorCode.none

    channel = TransactionMarkerChannelManager(
        1, metadata_cache(leader), scheduler, LISTENER, 5000, write_complete
    )
    metadata, complete = prepared_commit()
    try:
        channel.add_txn_markers_to_send(5, metadata, complete, lambda: True)
        async with asyncio.timeout(10):  # the sending task ends, done or dead
            while channel.pending_count:
                await asyncio.sleep(0.01)
        assert written == [complete]
        assert len(leader.markers) == 3  # two unreadable answers, then the marked one
        sent = {
            (m.producer_id, m.coordinator_epoch, m.transaction_result)
            for request in leader.markers
            for m in request.markers
        }
        assert sent == {(7, 5, True)}
        assert channel.markers_sent == 1
    finally:
        await channel.shutdown()
