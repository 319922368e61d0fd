"""One node's Raft, assembled (Kafka's ``KafkaRaftManager``): the metadata log in
``<metadata.log.dir>/__cluster_metadata-0`` with ``quorum-state`` beside its segments,
the client, its outbound channel, the controller listener that answers the quorum's
requests (voters only: an observer only fetches), and the task that polls.

Starting is two steps so that a node on port 0 learns its port before its quorum's
configuration names it: `start_listener`, then `start`. Event-loop only.
"""

from __future__ import annotations

import os
import random
import ssl
import uuid
from typing import Final, Generic, TypeVar

from tiercel.config.broker_config import Listener
from tiercel.server.network.connection import Buffer, CloseConnection, Connection
from tiercel.server.network.socket_server import SocketServer
from tiercel.server.raft.endpoints import Endpoints, HostPort
from tiercel.server.raft.kafka_metadata_log import METADATA_TOPIC_PARTITION, KafkaMetadataLog
from tiercel.server.raft.kafka_network_channel import KafkaNetworkChannel
from tiercel.server.raft.kafka_raft_client import KafkaRaftClient
from tiercel.server.raft.kafka_raft_client_driver import KafkaRaftClientDriver
from tiercel.server.raft.metadata_log_config import MetadataLogConfig
from tiercel.server.raft.quorum_config import QuorumConfig
from tiercel.server.raft.quorum_state_store import FileQuorumStateStore
from tiercel.server.raft.raft_apis import RaftApis
from tiercel.server.raft.raft_message import AsyncMessageQueue
from tiercel.server.raft.record_serde import RecordSerde
from tiercel.server.raft.timer import SystemTime, Time
from tiercel.storage.scheduler import Scheduler

__all__ = ["QUORUM_STATE_FILENAME", "KafkaRaftManager"]

T = TypeVar("T")

QUORUM_STATE_FILENAME: Final = "quorum-state"
# socket.request.max.bytes's default: a Fetch answer is at most one 8 MiB batch and more.
_MAX_REQUEST_BYTES: Final = 100 * 1024 * 1024
_MAX_QUEUED_REQUESTS: Final = 500
_CONNECTIONS_MAX_IDLE_MS: Final = 600_000


class KafkaRaftManager(Generic[T]):
    """Invariant: ``client`` exists from `start` on; the listener answers only then."""

    def __init__(
        self,
        node_id: int | None,
        directory_id: uuid.UUID,
        cluster_id: str,
        metadata_log_dir: str,
        serde: RecordSerde[T],
        scheduler: Scheduler,
        listener_name: str,
        listener: Listener | None = None,
        log_config: MetadataLogConfig | None = None,
        time: Time | None = None,
        local_endpoints: Endpoints | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._ssl_context = ssl_context
        self.node_id = node_id
        self.directory_id = directory_id
        self.cluster_id = cluster_id
        self.data_dir = os.path.join(metadata_log_dir, str(METADATA_TOPIC_PARTITION))
        self._serde = serde
        self._scheduler = scheduler
        self.listener_name = listener_name
        self._listener = listener
        self._log_config = log_config or MetadataLogConfig()
        self._time: Time = time or SystemTime()
        self._server: SocketServer | None = None
        self._apis: RaftApis | None = None
        self._channel: KafkaNetworkChannel | None = None
        self._log: KafkaMetadataLog | None = None
        self._driver: KafkaRaftClientDriver | None = None
        # A node whose controller listeners another server serves names them here.
        self._given_endpoints = local_endpoints

    async def start_listener(self) -> int | None:
        """Bind the controller listener; its port (None without a listener)."""
        if self._listener is None:
            return None
        server = self._server = SocketServer(
            [self._listener],
            self._handle_frame,
            _MAX_REQUEST_BYTES,
            _MAX_QUEUED_REQUESTS,
            _CONNECTIONS_MAX_IDLE_MS,
        )
        await server.start()
        return server.bound_ports[self._listener.name]

    async def _handle_frame(
        self, connection: Connection, frame: bytes | memoryview
    ) -> list[Buffer] | None:
        apis = self._apis
        if apis is None:
            raise CloseConnection()  # not started: the peer backs off and retries
        response = await apis.handle_frame(connection, frame)
        return None if response is None else list(response)

    async def start(self, config: QuorumConfig, rng: random.Random | None = None) -> None:
        """Open the log and quorum-state, restore the election state and start polling."""
        log = self._log = await KafkaMetadataLog.open(
            self.data_dir, self._time, self._scheduler, self._log_config
        )
        channel = self._channel = KafkaNetworkChannel(
            self.listener_name,
            f"raft-client-{self.node_id if self.node_id is not None else 'observer'}",
            config.request_timeout_ms,
            self._ssl_context,
        )
        client: KafkaRaftClient[T] = KafkaRaftClient(
            self.node_id,
            self.directory_id,
            self._serde,
            channel,
            AsyncMessageQueue(),
            log,
            self._time,
            config,
            self.cluster_id,
            self._local_endpoints(),
            rng,
        )
        store = FileQuorumStateStore(
            os.path.join(self.data_dir, QUORUM_STATE_FILENAME), self._scheduler
        )
        await client.initialize(store)
        self._apis = RaftApis(client)
        self._driver = KafkaRaftClientDriver(client)
        self._driver.start()

    def _local_endpoints(self) -> Endpoints:
        server, listener = self._server, self._listener
        if server is None or listener is None:
            return self._given_endpoints or Endpoints()
        port = server.bound_ports[listener.name]
        return Endpoints.of({self.listener_name: HostPort(listener.host or "localhost", port)})

    @property
    def client(self) -> KafkaRaftClient[T]:
        driver = self._driver
        if driver is None:
            raise RuntimeError("The raft manager is not started")
        client: KafkaRaftClient[T] = driver.client
        return client

    async def shutdown(self, timeout_ms: int = 5000) -> None:
        """Hand over a leadership (up to ``timeout_ms``; 0 stops at once, as a crash
        would, the log flushed), stop, close the log."""
        if self._driver is not None:
            await self._driver.shutdown(timeout_ms)
        if self._server is not None:
            await self._server.shutdown()
        if self._channel is not None:
            await self._channel.close()
        if self._log is not None:
            await self._log.close()
