"""A Raft client in isolation, driven by hand (Kafka's RaftClientTestContext): mock time,
log, quorum-state store, message queue and network channel; requests and responses are
delivered as kio entities and what the client sends is collected."""

from __future__ import annotations

import collections
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mock_raft_log import MockLog
from raft_support import MockQuorumStateStore, MockTime

from tiercel.protocol.entities import build_entity
from tiercel.protocol.errors import ErrorCode
from tiercel.server.raft.election_state import ElectionState
from tiercel.server.raft.endpoints import Endpoints, HostPort, Node
from tiercel.server.raft.kafka_raft_client import KafkaRaftClient
from tiercel.server.raft.leader_and_epoch import LeaderAndEpoch
from tiercel.server.raft.quorum_config import QuorumConfig
from tiercel.server.raft.raft_client_listener import BatchReader
from tiercel.server.raft.raft_message import (
    InboundRequest,
    InboundResponse,
    OutboundRequest,
    RaftMessage,
)
from tiercel.server.raft.raft_util import RESPONSE_TYPES
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.records_snapshot import SnapshotReader

LISTENER = "CONTROLLER"
CLUSTER_ID = "test-cluster"
ELECTION_TIMEOUT_MS = 1000
FETCH_TIMEOUT_MS = 2000
FETCH_MAX_WAIT_MS = 500


def address(node_id: int) -> HostPort:
    return HostPort("localhost", 9990 + node_id)


def node(node_id: int) -> Node:
    return Node(node_id, "localhost", 9990 + node_id)


class MockMessageQueue:
    """Never waits: a poll takes the next message if there is one."""

    def __init__(self) -> None:
        self.messages: collections.deque[RaftMessage] = collections.deque()
        self.wakeups = 0

    async def poll(self, timeout_ms: int) -> RaftMessage | None:
        return self.messages.popleft() if self.messages else None

    def add(self, message: RaftMessage) -> None:
        self.messages.append(message)

    @property
    def is_empty(self) -> bool:
        return not self.messages

    def wakeup(self) -> None:
        self.wakeups += 1


class MockNetworkChannel:
    def __init__(self) -> None:
        self.sent: list[OutboundRequest] = []
        self._correlation_id = 0

    @property
    def listener_name(self) -> str:
        return LISTENER

    def new_correlation_id(self) -> int:
        self._correlation_id += 1
        return self._correlation_id

    def send(self, request: OutboundRequest) -> None:
        self.sent.append(request)


@dataclass
class RecordingListener:
    """Acknowledges at once; keeps what it saw."""

    committed: list[tuple[int, int, list[bytes]]] = field(default_factory=list)
    snapshots: list[Any] = field(default_factory=list)
    leaders: list[LeaderAndEpoch] = field(default_factory=list)
    shutting_down: bool = False

    def handle_commit(self, reader: BatchReader[bytes]) -> None:
        for batch in reader:
            self.committed.append((batch.base_offset, batch.epoch, list(batch.records)))
        reader.close()

    def handle_load_snapshot(self, reader: SnapshotReader[bytes]) -> None:
        self.snapshots.append((reader.snapshot_id, [r for b in reader for r in b.records]))
        reader.close()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leaders.append(leader)

    def begin_shutdown(self) -> None:
        self.shutting_down = True

    @property
    def records(self) -> list[bytes]:
        return [r for _, _, records in self.committed for r in records]


class RaftClientTestContext:
    def __init__(
        self,
        local_id: int | None,
        voters: Sequence[int],
        log: MockLog | None = None,
        election: ElectionState | None = None,
        bootstrap: Sequence[int] = (),
    ) -> None:
        self.local_id = local_id
        self.voter_ids = list(voters)
        self.time = MockTime()
        self.log = log or MockLog()
        self.store = MockQuorumStateStore()
        if election is not None:
            self.store.writes.append(election)
        self.queue = MockMessageQueue()
        self.channel = MockNetworkChannel()
        self.listener = RecordingListener()
        config = QuorumConfig(
            {v: address(v) for v in voters},
            [address(b) for b in bootstrap],
            election_timeout_ms=ELECTION_TIMEOUT_MS,
            fetch_timeout_ms=FETCH_TIMEOUT_MS,
            request_timeout_ms=5000,
            retry_backoff_ms=50,
            append_linger_ms=0,
        )
        listeners = Endpoints.of({LISTENER: address(local_id if local_id is not None else 99)})
        self.client: KafkaRaftClient[bytes] = KafkaRaftClient(
            local_id,
            uuid.uuid4(),
            IdentitySerde(),
            self.channel,
            self.queue,
            self.log,
            self.time,
            config,
            CLUSTER_ID,
            listeners,
            random.Random(42),
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        )

    async def start(self) -> RaftClientTestContext:
        await self.client.initialize(self.store)
        self.client.register(self.listener)
        return self

    @property
    def quorum(self) -> Any:
        return self.client.quorum

    async def poll(self, times: int = 1) -> None:
        for _ in range(times):
            await self.client.poll()

    async def poll_until_idle(self) -> None:
        """Poll until every queued message was handled, then once more."""
        await self.client.poll()
        while not self.queue.is_empty:
            await self.client.poll()

    def sent(self, api_key: int) -> list[OutboundRequest]:
        """Requests sent of ``api_key`` since the last call; the others stay."""
        taken = [r for r in self.channel.sent if int(r.data.__api_key__) == api_key]
        self.channel.sent = [r for r in self.channel.sent if r not in taken]
        return taken

    def deliver_request(self, data: Any, version: int | None = None) -> InboundRequest:
        request = InboundRequest(
            len(self.channel.sent) + 1000,
            version if version is not None else int(data.__version__),
            data,
            LISTENER,
            self.time.milliseconds(),
        )
        self.client.handle(request)
        return request

    def deliver_response(self, request: OutboundRequest, data: Any) -> None:
        self.queue.add(InboundResponse(request.correlation_id, data, request.destination))

    @staticmethod
    def response(api_key: int, values: dict[str, Any]) -> Any:
        return build_entity(RESPONSE_TYPES[api_key], values, fill_missing=True)

    def vote_response(
        self, granted: bool, epoch: int, leader_id: int = -1, error: ErrorCode = ErrorCode.none
    ) -> Any:
        return self.response(
            52,
            {
                "error_code": ErrorCode.none,
                "topics": [
                    {
                        "topic_name": "__cluster_metadata",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "error_code": error,
                                "leader_id": leader_id,
                                "leader_epoch": epoch,
                                "vote_granted": granted,
                            }
                        ],
                    }
                ],
            },
        )
