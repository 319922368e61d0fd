"""An in-memory Raft quorum for the quorum controller's unit tests (a test double of the
RaftClient the controller is given), and helpers that build controllers on it.

`FakeRaftQuorum` holds one log shared by its voters' clients. Appends go to the log at
once; they commit when the test calls `commit` (or at once with ``auto_commit``), which
hands each registered listener the newly committed batches, as Kafka's RaftClient
delivers them. `elect` starts a new epoch: when another node wins, the uncommitted tail
is truncated (that leader's log wins), and everyone is told of the new leader, having
been given every committed batch first, as KafkaRaftClient tells its listeners.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from control_manager_support import BOOTSTRAP, controller_config

from tiercel.protocol.errors import RecordBatchTooLargeError
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion, serialize
from tiercel.server.controller.quorum_controller import QuorumController
from tiercel.server.controller.raft_client import RaftListener
from tiercel.server.raft.batch import Batch
from tiercel.server.raft.errors import NotLeaderError
from tiercel.server.raft.leader_and_epoch import LeaderAndEpoch
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch


class MemoryBatchReader:
    def __init__(self, batches: Sequence[Batch[ApiMessageAndVersion]]) -> None:
        self._batches = batches
        self.closed = False

    @property
    def base_offset(self) -> int:
        return self._batches[0].base_offset

    @property
    def last_offset(self) -> int:
        return self._batches[-1].last_offset

    def __iter__(self) -> Iterator[Batch[ApiMessageAndVersion]]:
        return iter(self._batches)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeSnapshot:
    snapshot_id: OffsetAndEpoch
    last_contained_log_timestamp: int
    records: list[ApiMessageAndVersion] = field(default_factory=list)
    is_frozen: bool = False

    def append(self, records: Sequence[ApiMessageAndVersion]) -> None:
        self.records.extend(records)

    async def freeze(self) -> int:
        self.is_frozen = True
        return len(self.records)

    def close(self) -> None:
        pass

    def reader(self) -> FakeSnapshotReader:
        return FakeSnapshotReader(self)


class FakeSnapshotReader:
    def __init__(self, snapshot: FakeSnapshot) -> None:
        self._snapshot = snapshot

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot.snapshot_id

    @property
    def last_contained_log_timestamp(self) -> int:
        return self._snapshot.last_contained_log_timestamp

    def __iter__(self) -> Iterator[Batch[ApiMessageAndVersion]]:
        records = self._snapshot.records
        yield Batch(0, self._snapshot.snapshot_id.epoch, 0, 0, max(len(records) - 1, 0), records)

    def close(self) -> None:
        pass


class FakeRaftQuorum:
    """Event-loop only."""

    def __init__(self, auto_commit: bool = True) -> None:
        self.auto_commit = auto_commit
        self.log: list[Batch[ApiMessageAndVersion]] = []
        self.high_watermark = 0  # The offset after the last committed record.
        self.leader_and_epoch = LeaderAndEpoch(None, 0)
        self.clients: dict[int, FakeRaftClient] = {}
        self.snapshots: list[FakeSnapshot] = []
        self.resigned: list[tuple[int, int]] = []
        self.max_batch_records = 100_000

    def client(self, node_id: int) -> FakeRaftClient:
        return self.clients.setdefault(node_id, FakeRaftClient(self, node_id))

    @property
    def end_offset(self) -> int:
        return self.log[-1].last_offset + 1 if self.log else 0

    def committed_records(self) -> list[tuple[int, ApiMessageAndVersion]]:
        return [
            (batch.base_offset + i, record)
            for batch in self.log
            if batch.last_offset < self.high_watermark
            for i, record in enumerate(batch.records)
        ]

    def append(self, node_id: int, epoch: int, records: Sequence[ApiMessageAndVersion]) -> int:
        if not self.leader_and_epoch.is_leader(node_id) or epoch != self.leader_and_epoch.epoch:
            raise NotLeaderError("Append failed because the replica is not the current leader")
        if len(records) > self.max_batch_records:
            raise RecordBatchTooLargeError(f"{len(records)} records do not fit a batch")
        base = self.end_offset
        size = sum(len(serialize(r)) for r in records)
        self.log.append(Batch(base, epoch, 0, size, base + len(records) - 1, list(records)))
        if self.auto_commit:
            asyncio.get_running_loop().call_soon(self.commit)
        return base + len(records) - 1

    def commit(self) -> None:
        """Everything appended so far commits; listeners get the new batches."""
        old, self.high_watermark = self.high_watermark, self.end_offset
        if self.high_watermark == old:
            return
        new = [b for b in self.log if b.base_offset >= old]
        for client in self.clients.values():
            client.deliver(new)

    def elect(self, node_id: int | None) -> None:
        """A new epoch led by ``node_id`` (None: no leader known yet). Another leader
        loses the log's uncommitted tail, as when a voter without it wins the election;
        the same leader elected again keeps its own log, as Raft's leader always does."""
        if node_id is None or not self.leader_and_epoch.is_leader(node_id):
            self.log = [b for b in self.log if b.last_offset < self.high_watermark]
        self.leader_and_epoch = LeaderAndEpoch(node_id, self.leader_and_epoch.epoch + 1)
        for client in self.clients.values():
            client.tell_leader(self.leader_and_epoch)

    def load_snapshot(self, node_id: int, snapshot: FakeSnapshot) -> None:
        self.clients[node_id].listener_load_snapshot(snapshot)


class FakeRaftClient:
    """One voter's view of the `FakeRaftQuorum`."""

    def __init__(self, quorum: FakeRaftQuorum, node_id: int) -> None:
        self._quorum = quorum
        self.node_id = node_id
        self.listener: RaftListener | None = None

    def register(self, listener: RaftListener) -> None:
        self.listener = listener
        committed = [b for b in self._quorum.log if b.last_offset < self._quorum.high_watermark]
        if committed:
            listener.handle_commit(MemoryBatchReader(committed))
        if self._quorum.leader_and_epoch.leader_id is not None:
            listener.handle_leader_change(self._quorum.leader_and_epoch)

    def deliver(self, batches: Sequence[Batch[ApiMessageAndVersion]]) -> None:
        if self.listener is not None and batches:
            self.listener.handle_commit(MemoryBatchReader(batches))

    def tell_leader(self, leader: LeaderAndEpoch) -> None:
        if self.listener is not None:
            self.listener.handle_leader_change(leader)

    def listener_load_snapshot(self, snapshot: FakeSnapshot) -> None:
        assert self.listener is not None
        self.listener.handle_load_snapshot(snapshot.reader())

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self._quorum.leader_and_epoch

    @property
    def log_end_offset(self) -> int:
        return self._quorum.end_offset

    def schedule_atomic_append(self, epoch: int, records: Sequence[ApiMessageAndVersion]) -> int:
        return self._quorum.append(self.node_id, epoch, records)

    def resign(self, epoch: int) -> None:
        self._quorum.resigned.append((self.node_id, epoch))

    def create_snapshot(
        self, snapshot_id: OffsetAndEpoch, last_contained_log_time: int
    ) -> FakeSnapshot | None:
        if snapshot_id.offset > self._quorum.high_watermark:
            raise ValueError("snapshot past the high watermark")
        snapshot = FakeSnapshot(snapshot_id, last_contained_log_time)
        self._quorum.snapshots.append(snapshot)
        return snapshot


def new_controller(
    quorum: FakeRaftQuorum, node_id: int = 0, time: object = None, **overrides: object
) -> QuorumController:
    """A started controller. On the real clock sessions last an hour unless a test says
    otherwise, so a slow machine never fences a broker behind a test's back."""
    settings: dict[str, object] = {"session_timeout_ms": 3_600_000}
    settings.update(overrides)
    controller = QuorumController(
        controller_config(node_id, **settings),
        quorum.client(node_id),
        BOOTSTRAP,
        time=time,  # type: ignore[arg-type]
        rng=random.Random(node_id),
    )
    controller.start()
    return controller


async def settle(controller: QuorumController) -> None:
    """Everything queued before has been handled: a read runs after it (FIFO)."""
    await controller.finalized_features()
