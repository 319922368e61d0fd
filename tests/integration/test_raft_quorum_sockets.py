"""Three Raft voters and one observer in this process over real TCP on 127.0.0.1: the
wire path of the quorum (kio encoding, framing, correlation ids, ApiVersions), an
election, replication to the observer, which knows only a bootstrap list, and a new
election once the leader stops, with nothing committed lost."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tiercel.config.broker_config import Listener
from tiercel.server.raft.endpoints import HostPort
from tiercel.server.raft.errors import NotLeaderError
from tiercel.server.raft.kafka_raft_manager import QUORUM_STATE_FILENAME, KafkaRaftManager
from tiercel.server.raft.leader_and_epoch import LeaderAndEpoch
from tiercel.server.raft.quorum_config import QuorumConfig
from tiercel.server.raft.raft_client_listener import BatchReader
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.records_snapshot import SnapshotReader
from tiercel.server.replication.broker_client import BrokerClient
from tiercel.storage.scheduler import Scheduler

LISTENER = "CONTROLLER"
VOTERS = (1, 2, 3)
OBSERVER = 4
TIMEOUTS = {
    "election_timeout_ms": 500,
    "election_backoff_max_ms": 500,
    "fetch_timeout_ms": 1000,
    "request_timeout_ms": 1000,
    "retry_backoff_ms": 20,
    "append_linger_ms": 5,
}


@dataclass
class Recorder:
    """The state machine: every committed record, in order."""

    records: list[bytes] = field(default_factory=list)
    leader: LeaderAndEpoch | None = None

    def handle_commit(self, reader: BatchReader[bytes]) -> None:
        for batch in reader:
            self.records.extend(batch.records)
        reader.close()

    def handle_load_snapshot(self, reader: SnapshotReader[bytes]) -> None:
        raise AssertionError("no snapshot was taken")

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader

    def begin_shutdown(self) -> None:
        pass


@dataclass
class Quorum:
    managers: dict[int, KafkaRaftManager[bytes]]
    recorders: dict[int, Recorder]
    ports: dict[int, int]

    def leader(self) -> int | None:
        for node_id, manager in self.managers.items():
            if manager.client.quorum.is_leader:
                return node_id
        return None


async def wait_until(condition: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {within_s} s"
        await asyncio.sleep(0.01)


@pytest.fixture
async def quorum(tmp_path: Path) -> AsyncIterator[Quorum]:
    scheduler = Scheduler(asyncio.get_running_loop(), 2)
    managers: dict[int, KafkaRaftManager[bytes]] = {}
    for node_id in (*VOTERS, OBSERVER):
        listener = Listener(LISTENER, "127.0.0.1", 0) if node_id in VOTERS else None
        managers[node_id] = KafkaRaftManager(
            node_id,
            uuid.uuid4(),
            "raft-socket-test",
            str(tmp_path / f"node-{node_id}"),
            IdentitySerde(),
            scheduler,
            LISTENER,
            listener,
        )
    ports = {v: await managers[v].start_listener() or 0 for v in VOTERS}
    addresses = {v: HostPort("127.0.0.1", ports[v]) for v in VOTERS}
    recorders = {node_id: Recorder() for node_id in managers}
    for node_id, manager in managers.items():
        if node_id in VOTERS:
            config = QuorumConfig(addresses, **TIMEOUTS)
        else:
            # An observer needs no voter list: the bootstrap servers point it at the
            # leader (KIP-853's controller.quorum.bootstrap.servers).
            config = QuorumConfig({}, list(addresses.values()), **TIMEOUTS)
        await manager.start(config)
        manager.client.register(recorders[node_id])
    try:
        yield Quorum(managers, recorders, ports)
    finally:
        for manager in managers.values():
            await manager.shutdown(0)
        scheduler.shutdown()


async def writable_leader(quorum: Quorum) -> tuple[int, int]:
    """(id, epoch) of a leader whose listener was told it leads: the first entry of its
    epoch is committed, so a majority follows it."""
    found: list[tuple[int, int]] = []

    def ready() -> bool:
        for node_id, manager in quorum.managers.items():
            told = quorum.recorders[node_id].leader
            epoch = manager.client.leader_and_epoch.epoch
            if (
                manager.client.quorum.is_leader
                and told is not None
                and told.is_leader(node_id)
                and told.epoch == epoch
            ):
                found.append((node_id, epoch))
                return True
        return False

    await wait_until(ready, 15, "a writable leader")
    return found[-1]


async def append_and_wait(quorum: Quorum, values: list[bytes], nodes: list[int]) -> None:
    """Append ``values`` (batches of three) until every node of ``nodes`` has committed
    them all. A leader deposed before they commit may lose them (they were not
    committed): they go again to the next leader."""

    def committed() -> bool:
        return all(set(values) <= set(quorum.recorders[n].records) for n in nodes)

    deadline = time.monotonic() + 30
    while not committed():
        assert time.monotonic() < deadline, f"{values[0]!r}.. not committed on {nodes}"
        leader_id, epoch = await writable_leader(quorum)
        client = quorum.managers[leader_id].client
        try:
            for i in range(0, len(values), 3):
                client.schedule_atomic_append(epoch, values[i : i + 3])
        except NotLeaderError:
            continue
        await wait_until(
            lambda c=client, e=epoch: committed() or c.leader_and_epoch.epoch != e,
            15,
            f"{values[0]!r}.. committed or a new epoch",
        )


def first_occurrences(records: list[bytes], prefix: bytes) -> list[bytes]:
    return list(dict.fromkeys(r for r in records if r.startswith(prefix)))


async def test_three_voters_and_an_observer_over_tcp(quorum: Quorum) -> None:
    await wait_until(lambda: quorum.leader() is not None, 15, "a leader")
    first = [b"first-%d" % i for i in range(10)]
    await append_and_wait(quorum, first, [*VOTERS, OBSERVER])
    old_leader, old_epoch = await writable_leader(quorum)
    for voter in VOTERS:
        # quorum-state as Kafka writes it; every voter has reached the leader's epoch.
        path = os.path.join(quorum.managers[voter].data_dir, QUORUM_STATE_FILENAME)
        with open(path) as f:
            state = json.load(f)
        assert state["leaderEpoch"] >= old_epoch
    committed_before = {n: list(quorum.recorders[n].records) for n in quorum.recorders}

    # The leader stops as a crash would (no resignation): the others elect a new one.
    await quorum.managers.pop(old_leader).shutdown(0)
    await wait_until(
        lambda: (
            (new := quorum.leader()) is not None
            and quorum.managers[new].client.leader_and_epoch.epoch > old_epoch
        ),
        15,
        "a new leader",
    )
    survivors = [v for v in VOTERS if v != old_leader]
    second = [b"second-%d" % i for i in range(10)]
    await append_and_wait(quorum, second, [*survivors, OBSERVER])
    for node_id in (*survivors, OBSERVER):
        records = quorum.recorders[node_id].records
        before = committed_before[node_id]
        assert records[: len(before)] == before, f"node {node_id} lost committed records"
        assert first_occurrences(records, b"first") == first
        assert first_occurrences(records, b"second") == second

    # DescribeQuorum v2 from a Kafka client's point of view: a frame on the leader's port.
    new_leader, _ = await writable_leader(quorum)
    port = quorum.ports[new_leader]
    admin = BrokerClient(new_leader, lambda: ("127.0.0.1", port), "test-admin", 5.0)
    try:
        version, response = await admin.request(
            55,
            (0, 2),
            {
                "topics": [
                    {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}
                ]
            },
        )
    finally:
        admin.close()
    assert version == 2
    partition = response.topics[0].partitions[0]
    assert partition.leader_id == new_leader
    assert sorted(v.replica_id for v in partition.current_voters) == list(VOTERS)
    assert [o.replica_id for o in partition.observers] == [OBSERVER]
    assert partition.high_watermark >= len(first) + len(second)
