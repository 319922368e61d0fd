"""The KRaft quorum under faults, with real processes (KIP-595, KIP-630): a paused
voter and a paused active controller, two of three voters down, a voter's divergent
metadata log truncated, restarts from snapshots, and three controllers beside three
brokers. Voters are paused with SIGSTOP (sockets open, nothing answered) or killed; the
clients are confluent-kafka's, the quorum is read from DescribeQuorum and from each
node's quorum-state file."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from support.broker import BrokerProcess
from support.kraft import (
    controller_ports,
    kraft_node,
    pause,
    quorum_leader,
    quorum_state,
    resume,
)

# KafkaRaftClient's transition log line, with LeaderState's description.
_BECAME_LEADER = re.compile(
    r"completed transition to Leader\(localReplicaKey=ReplicaKey\(id=(\d+),.*?, epoch=(\d+),"
)


@dataclass
class Quorum:
    """Nodes of one cluster, and the controller port of each voter."""

    nodes: dict[int, BrokerProcess]
    ports: dict[int, int]

    def bootstrap(self, *node_ids: int) -> str:
        return ",".join(self.nodes[i].bootstrap for i in node_ids)


def start_all(nodes: list[BrokerProcess]) -> None:
    # Voters start together: each waits for a quorum before its broker registers.
    for node in nodes:
        node.launch()
    for node in nodes:
        node.wait_started(90)


@pytest.fixture(scope="module")
def combined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    """Three combined nodes (broker,controller) with the defaults' quorum timeouts."""
    root = tmp_path_factory.mktemp("combined")
    ports = controller_ports([1, 2, 3])
    # A shorter broker session than the default 9 s: a paused node's broker is fenced,
    # and left out of clients' metadata, sooner.
    session = {"broker.session.timeout.ms": 5000, "broker.heartbeat.interval.ms": 1000}
    nodes = {i: kraft_node(root, i, ports, overrides=session) for i in (1, 2, 3)}
    try:
        start_all(list(nodes.values()))
        yield Quorum(nodes, ports)
    finally:
        for node in nodes.values():
            node.kill()


def create_topic(bootstrap: str, topic: str, partitions: int = 1, replicas: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, replicas)])[topic].result(60)


def topics(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=20).topics)


def brokers(bootstrap: str) -> set[int]:
    """The brokers metadata names: the registered, unfenced ones (Kafka's
    KRaftMetadataCache)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=20).brokers)


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def voter_end_offsets(partition: Any) -> dict[int, int]:
    """Each voter's log end offset in a DescribeQuorum partition (the leader's view)."""
    return {v.replica_id: v.log_end_offset for v in partition.current_voters}


def leaders_by_epoch(nodes: list[BrokerProcess]) -> dict[int, set[int]]:
    """Every (epoch, node) a node's log says it became the quorum's leader in."""
    found: dict[int, set[int]] = {}
    for node in nodes:
        for node_id, epoch in _BECAME_LEADER.findall(node.log_text()):
            found.setdefault(int(epoch), set()).add(int(node_id))
    return found


def test_a_paused_voter_and_a_paused_active_controller(combined: Quorum) -> None:
    nodes, ports = combined.nodes, combined.ports
    before = quorum_leader(ports)
    leader_id = before.leader_id
    follower_id = next(i for i in nodes if i != leader_id)
    awake = [i for i in nodes if i != follower_id]

    # A paused follower: the two others are a majority, so the leader stays and a
    # metadata change commits; the paused voter's log end stands still meanwhile.
    pause(nodes[follower_id])
    try:
        # Clients could still send to its broker until the controller fences it, a
        # session timeout after its last heartbeat.
        wait_for(
            lambda: follower_id not in brokers(combined.bootstrap(*awake)),
            "the paused node's broker to be fenced",
        )
        create_topic(combined.bootstrap(*awake), "while-a-follower-sleeps")
        during = quorum_leader(ports)
        assert (during.leader_id, during.leader_epoch) == (leader_id, before.leader_epoch)
        assert during.high_watermark > before.high_watermark
        ends = voter_end_offsets(during)
        assert ends[follower_id] < ends[leader_id]
        target = ends[leader_id]
    finally:
        resume(nodes[follower_id])
    # Resumed, it fetches what it missed: its log end reaches the leader's of then.
    wait_for(
        lambda: voter_end_offsets(quorum_leader(ports))[follower_id] >= target,
        "the resumed follower to catch up",
    )
    assert "while-a-follower-sleeps" in topics(nodes[follower_id].bootstrap)

    # A paused active controller: the others elect one of them in a later epoch, and
    # it commits metadata changes.
    others = [i for i in nodes if i != leader_id]
    pause(nodes[leader_id])
    try:
        elected = quorum_leader({i: ports[i] for i in others})
        assert elected.leader_id != leader_id
        assert elected.leader_epoch > before.leader_epoch
        wait_for(
            lambda: leader_id not in brokers(combined.bootstrap(*others)),
            "the paused controller's broker to be fenced",
        )
        create_topic(combined.bootstrap(*others), "after-the-controller-slept")
        target = voter_end_offsets(quorum_leader({i: ports[i] for i in others}))[elected.leader_id]
    finally:
        resume(nodes[leader_id])
    # Resumed, the old leader learns the new epoch and follows: its quorum-state names
    # the new leader, it fetches what was committed without it, and no epoch ever had
    # two leaders.
    wait_for(
        lambda: (
            (
                quorum_state(nodes[leader_id])["leaderEpoch"],
                quorum_state(nodes[leader_id])["leaderId"],
            )
            == (elected.leader_epoch, elected.leader_id)
        ),
        "the old leader to follow the new one",
    )
    wait_for(
        lambda: voter_end_offsets(quorum_leader(ports))[leader_id] >= target,
        "the old leader to catch up",
    )
    after = quorum_leader(ports)
    assert (after.leader_id, after.leader_epoch) == (elected.leader_id, elected.leader_epoch)
    states = [quorum_state(node) for node in nodes.values()]
    assert {(s["leaderEpoch"], s["leaderId"]) for s in states} == {
        (elected.leader_epoch, elected.leader_id)
    }
    elections = leaders_by_epoch(list(nodes.values()))
    assert elections[before.leader_epoch] == {leader_id}
    assert elections[elected.leader_epoch] == {elected.leader_id}
    assert all(len(leaders) == 1 for leaders in elections.values())
    # Nothing committed was lost, and the old leader's node serves again: it sees both
    # topics and takes a metadata change and records as a broker.
    old = nodes[leader_id].bootstrap
    assert {"while-a-follower-sleeps", "after-the-controller-slept"} <= topics(old)
    create_topic(old, "after-the-old-controller-woke", 1, 3)
    produce(old, "after-the-old-controller-woke", 20)
    assert consume(old, "after-the-old-controller-woke", 20) == 20


def produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    delivered: list[object] = []
    for i in range(start, start + count):
        producer.produce(topic, value=b"v%d" % i, on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(60) == 0
    assert delivered == [None] * count


def consume(bootstrap: str, topic: str, count: int) -> int:
    """How many distinct records of ``topic`` a fresh consumer group reads (stopping at
    ``count`` or after a bound)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    values: set[tuple[int | None, int | None]] = set()
    deadline = time.monotonic() + 60
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.add((message.partition(), message.offset()))
    finally:
        consumer.close()
    return len(values)
