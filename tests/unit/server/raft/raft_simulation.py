"""A deterministic simulation of a Raft quorum (Kafka's RaftEventSimulationTest): voters and
observers in one process, an in-memory network with seeded delays, drops and partitions,
a mock clock every timer runs on, and nodes that crash and restart with what their log and
quorum-state had made durable. Invariants are checked after every event."""

from __future__ import annotations

import heapq
import itertools
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from mock_raft_log import MockLog
from raft_client_context import LISTENER, MockMessageQueue, address
from raft_support import MockQuorumStateStore, MockTime

from tiercel.server.raft.endpoints import Endpoints, Node
from tiercel.server.raft.errors import NotLeaderError
from tiercel.server.raft.kafka_raft_client import KafkaRaftClient
from tiercel.server.raft.leader_and_epoch import LeaderAndEpoch
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.quorum_config import QuorumConfig
from tiercel.server.raft.raft_client_listener import BatchReader
from tiercel.server.raft.raft_message import InboundRequest, InboundResponse, OutboundRequest
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.records_snapshot import RecordsSnapshotReader, SnapshotReader

CONFIG = dict(
    election_timeout_ms=100,
    election_backoff_max_ms=100,
    fetch_timeout_ms=200,
    request_timeout_ms=300,
    retry_backoff_ms=10,
    append_linger_ms=0,
)
FETCH_MAX_WAIT_MS = 50
POLL_INTERVAL_MS = 5


class CounterStateMachine:
    """The replicated state: every committed data record by offset. A snapshot holds
    them all ("offset=value" records)."""

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.committed: dict[int, bytes] = {}
        self.last_batch: OffsetAndEpoch | None = None  # end offset and epoch seen
        self.leader: LeaderAndEpoch | None = None
        self.snapshot_loads = 0

    def handle_commit(self, reader: BatchReader[bytes]) -> None:
        for batch in reader:
            for i, value in enumerate(batch.records):
                self.committed[batch.base_offset + i] = value
            self.last_batch = OffsetAndEpoch(batch.last_offset + 1, batch.epoch)
        reader.close()

    def handle_load_snapshot(self, reader: SnapshotReader[bytes]) -> None:
        self.snapshot_loads += 1
        self.committed = {}
        for batch in reader:
            for record in batch.records:
                offset, _, value = record.partition(b"=")
                self.committed[int(offset)] = value
        self.last_batch = reader.snapshot_id
        reader.close()

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader

    def begin_shutdown(self) -> None:
        pass

    @property
    def writable_epoch(self) -> int | None:
        leader = self.leader
        if leader is not None and leader.is_leader(self.node.node_id):
            return leader.epoch
        return None


@dataclass
class PersistentState:
    """What survives a crash."""

    log: MockLog = field(default_factory=MockLog)
    store: MockQuorumStateStore = field(default_factory=MockQuorumStateStore)
    directory_id: uuid.UUID = field(default_factory=uuid.uuid4)


class SimChannel:
    def __init__(self, cluster: Cluster, node_id: int, incarnation: int) -> None:
        self._cluster = cluster
        self._node_id = node_id
        self._incarnation = incarnation

    @property
    def listener_name(self) -> str:
        return LISTENER

    def new_correlation_id(self) -> int:
        return next(self._cluster.correlation_ids)

    def send(self, request: OutboundRequest) -> None:
        self._cluster.route_request(self._node_id, self._incarnation, request)


class SimNode:
    def __init__(self, cluster: Cluster, node_id: int, incarnation: int) -> None:
        self.node_id = node_id
        self.incarnation = incarnation
        self.state = cluster.persistent[node_id]
        self.queue = MockMessageQueue()
        self.machine = CounterStateMachine(self)
        self.client: KafkaRaftClient[bytes] = KafkaRaftClient(
            node_id,
            self.state.directory_id,
            IdentitySerde(),
            SimChannel(cluster, node_id, incarnation),
            self.queue,
            self.state.log,
            cluster.time,
            cluster.quorum_config,
            "sim-cluster",
            Endpoints.of({LISTENER: address(node_id)}),
            random.Random(cluster.random.random()),
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        )

    async def start(self) -> None:
        await self.client.initialize(self.state.store)
        self.client.register(self.machine)

    async def poll(self) -> None:
        """Poll until nothing is queued (Kafka's simulation RaftNode.poll)."""
        await self.client.poll()
        while not self.queue.is_empty:
            await self.client.poll()


@dataclass(order=True)
class _Event:
    deadline: int
    seq: int
    action: Callable[[], Awaitable[None]] = field(compare=False)


class Cluster:
    def __init__(self, voters: int, observers: int, seed: int) -> None:
        self.seed = seed
        self.random = random.Random(seed)
        self.time = MockTime(0)
        self.voter_ids = list(range(1, voters + 1))
        self.observer_ids = list(range(voters + 1, voters + observers + 1))
        self.quorum_config = QuorumConfig({v: address(v) for v in self.voter_ids}, **CONFIG)
        self.persistent = {n: PersistentState() for n in self.voter_ids + self.observer_ids}
        self.running: dict[int, SimNode] = {}
        self._incarnations = itertools.count()
        self.correlation_ids = itertools.count(1)
        self._events: list[_Event] = []
        self._seq = itertools.count()
        self.drop_probability = 0.0
        self.max_delay_ms = 5
        self.isolated: set[int] = set()
        self.appended = 0
        self.invariants = Invariants(self)

    # -- nodes -----------------------------------------------------------------------------

    @property
    def node_ids(self) -> list[int]:
        return self.voter_ids + self.observer_ids

    async def start(self, node_id: int) -> None:
        self.persistent[node_id].log.reopen()
        node = SimNode(self, node_id, next(self._incarnations))
        self.running[node_id] = node
        await node.start()

    def kill(self, node_id: int) -> None:
        """A crash: the process is gone, so is what its log had not flushed."""
        self.running.pop(node_id, None)

    async def start_all(self) -> None:
        for node_id in self.node_ids:
            await self.start(node_id)

    def leader(self) -> SimNode | None:
        leaders = [n for n in self.running.values() if n.client.quorum.is_leader]
        return max(leaders, key=lambda n: n.client.quorum.epoch, default=None)

    # -- network ---------------------------------------------------------------------------

    def _delivers(self, source: int, destination: int) -> bool:
        if source in self.isolated or destination in self.isolated:
            return False
        return self.random.random() >= self.drop_probability

    def _delay(self) -> int:
        return self.random.randint(1, self.max_delay_ms)

    def route_request(self, source: int, incarnation: int, request: OutboundRequest) -> None:
        destination = request.destination.id
        if destination not in self.persistent or not self._delivers(source, destination):
            return  # lost: the sender's request manager times it out

        async def deliver() -> None:
            node = self.running.get(destination)
            if node is None:
                return
            inbound = InboundRequest(
                request.correlation_id,
                int(request.data.__version__),
                request.data,
                LISTENER,
                self.time.milliseconds(),
            )

            def respond(response: object | None, error: BaseException | None) -> None:
                if response is None or not self._delivers(destination, source):
                    return

                async def answer() -> None:
                    sender = self.running.get(source)
                    if sender is None or sender.incarnation != incarnation:
                        return
                    node_of_destination = Node(destination, *_host_port(destination))
                    request.completion.complete(
                        InboundResponse(request.correlation_id, response, node_of_destination)
                    )
                    await sender.poll()

                self.schedule(self._delay(), answer)

            inbound.completion.when_complete(respond)
            node.client.handle(inbound)
            await node.poll()

        self.schedule(self._delay(), deliver)

    # -- events ------------------------------------------------------------------------------

    def schedule(self, delay_ms: int, action: Callable[[], Awaitable[None]]) -> None:
        heapq.heappush(self._events, _Event(self.time.now + delay_ms, next(self._seq), action))

    def every(self, period_ms: int, jitter_ms: int, action: Callable[[], Awaitable[None]]) -> None:
        async def repeat() -> None:
            await action()
            self.schedule(period_ms + self.random.randint(0, jitter_ms), repeat)

        self.schedule(self.random.randint(0, period_ms), repeat)

    def schedule_polling(self) -> None:
        for node_id in self.node_ids:

            async def poll(node_id: int = node_id) -> None:
                node = self.running.get(node_id)
                if node is not None:
                    await node.poll()

            self.every(POLL_INTERVAL_MS, 2, poll)

    def schedule_appends(self, period_ms: int = 10) -> None:
        async def append() -> None:
            leader = self.leader()
            if leader is None:
                return
            epoch = leader.machine.writable_epoch
            if epoch is None:
                return
            values = [
                f"{self.seed}-{self.appended + i}".encode() for i in range(1 + self.appended % 3)
            ]
            try:
                leader.client.schedule_atomic_append(epoch, values)
            except NotLeaderError:
                return
            self.appended += len(values)

        self.every(period_ms, 3, append)

    def schedule_snapshots(self, period_ms: int = 300) -> None:
        """Each node snapshots its state machine now and then, and a retention pass moves
        its log start to its latest snapshot, so lagging followers need FetchSnapshot."""

        async def snapshot() -> None:
            for node in list(self.running.values()):
                end = node.machine.last_batch
                log = node.state.log
                latest = log.latest_snapshot_id()
                if end is None or end.offset <= log.start_offset:
                    continue
                if latest is None or end > latest:
                    writer = node.client.create_snapshot(end, self.time.milliseconds())
                    if writer is not None:
                        writer.append(
                            [b"%d=%s" % (o, v) for o, v in sorted(node.machine.committed.items())]
                        )
                        await writer.freeze()
                        writer.close()
                latest = log.latest_snapshot_id()
                if latest is not None and latest.offset > log.start_offset:
                    log.delete_before_snapshot(latest)

        self.every(period_ms, 50, snapshot)

    async def run_until(self, deadline_ms: int) -> None:
        while self._events and self._events[0].deadline <= deadline_ms:
            event = heapq.heappop(self._events)
            self.time.now = max(self.time.now, event.deadline)
            await event.action()
            self.invariants.verify()
        self.time.now = max(self.time.now, deadline_ms)

    async def run_for(self, ms: int) -> None:
        await self.run_until(self.time.now + ms)

    async def run_until_true(
        self, condition: Callable[[], bool], within_ms: int, what: str
    ) -> None:
        deadline = self.time.now + within_ms
        while not condition():
            assert self.time.now < deadline, f"seed {self.seed}: {what} not within {within_ms} ms"
            await self.run_until(self.time.now + POLL_INTERVAL_MS)


def _host_port(node_id: int) -> tuple[str, int]:
    a = address(node_id)
    return a.host, a.port


class Invariants:
    """What must hold at every step (Kafka's simulation invariants, and more):

    - epochs only grow on each node, and a running node is in its persisted epoch;
    - at most one leader per epoch, ever;
    - each running node's high watermark never moves back while it runs;
    - a majority of voters has the leader's log up to its high watermark;
    - committed data never changes: every node that has an offset below its high
      watermark has the same record there, as every state machine applied it.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.epochs: dict[int, int] = {}
        self.leaders: dict[int, int] = {}
        self.high_watermarks: dict[tuple[int, int], int] = {}
        self.committed: dict[int, bytes] = {}

    def verify(self) -> None:
        cluster = self.cluster
        seed = cluster.seed
        for node_id, state in cluster.persistent.items():
            election = state.store.writes[-1] if state.store.writes else None
            if election is None:
                continue
            previous = self.epochs.get(node_id, 0)
            assert election.epoch >= previous, f"seed {seed}: epoch of {node_id} went back"
            self.epochs[node_id] = election.epoch
            node = cluster.running.get(node_id)
            if node is not None and node.client.is_initialized:
                assert node.client.quorum.epoch == election.epoch, f"seed {seed}: epoch not durable"
            if election.leader_id is not None:
                leader = self.leaders.setdefault(election.epoch, election.leader_id)
                assert leader == election.leader_id, (
                    f"seed {seed}: two leaders in epoch {election.epoch}: "
                    f"{leader} and {election.leader_id}"
                )
        for node in cluster.running.values():
            if not node.client.is_initialized:
                continue
            key = (node.node_id, node.incarnation)
            high_watermark = node.client.high_watermark
            if high_watermark is not None:
                previous = self.high_watermarks.get(key, 0)
                assert high_watermark >= previous, f"seed {seed}: HW of {key} went back"
                self.high_watermarks[key] = high_watermark
            for offset, value in node.machine.committed.items():
                known = self.committed.setdefault(offset, value)
                assert known == value, f"seed {seed}: committed offset {offset} changed on {key}"
        leader = cluster.leader()
        if leader is not None and leader.client.high_watermark is not None:
            high_watermark = leader.client.high_watermark
            reached = sum(
                1
                for v in cluster.voter_ids
                if cluster.persistent[v].log.end_offset.message_offset >= high_watermark
            )
            assert reached >= len(cluster.voter_ids) // 2 + 1, (
                f"seed {seed}: the high watermark {high_watermark} is not on a majority"
            )

    def check_logs(self) -> None:
        """Every running node's log agrees with the committed records below its HW."""
        for node in self.cluster.running.values():
            high_watermark = node.client.high_watermark
            if high_watermark is None:
                continue
            log = node.state.log
            present = {}
            for batch in log.batches:
                if batch.base_offset >= high_watermark:
                    break
                present.update(_data_records(batch.data))
            for offset, value in self.committed.items():
                if log.start_offset <= offset < high_watermark:
                    assert present.get(offset) == value, (
                        f"seed {self.cluster.seed}: node {node.node_id} lost committed "
                        f"offset {offset}"
                    )


def _data_records(data: bytes) -> dict[int, bytes]:
    from tiercel.server.raft.records_iterator import iter_decoded_batches

    found: dict[int, bytes] = {}
    for batch in iter_decoded_batches(data, IdentitySerde()):
        for i, value in enumerate(batch.records):
            found[batch.base_offset + i] = value
    return found


def snapshot_records(reader: RecordsSnapshotReader[bytes]) -> list[bytes]:
    return [r for b in reader for r in b.records]
