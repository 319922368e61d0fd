"""KIP-853 dynamic quorums with real processes: nodes configured with
controller.quorum.bootstrap.servers only, formatted with `tiercel storage format
--initial-controllers` (three combined nodes) or `--standalone` (one), learn their
voters from the bootstrap snapshot and the metadata log, elect a leader, serve clients,
and answer DescribeQuorum with kraft.version 1 voters: directory ids and endpoints."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from support.broker import BrokerProcess
from support.clients import consume_values, produce_numbered
from support.kraft import (
    controller_ports,
    describe_quorum,
    kraft_node,
    metadata_partition_dir,
    quorum_leader,
    quorum_state,
)
from tiercel.storage.checkpoint_file import uuid_to_kafka_str
from tiercel.storage.meta_properties import MetaProperties, random_directory_id

BOOTSTRAP_SNAPSHOT = "00000000000000000000-0000000000.checkpoint"


@pytest.fixture
def nodes() -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    for node in started:
        node.kill()


def create_topic(bootstrap: str, topic: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([topic])[topic.topic].result(60)


def metadata_directory_id(node: BrokerProcess) -> uuid.UUID | None:
    meta = MetaProperties.read(str(metadata_partition_dir(node).parent))
    assert meta is not None
    return meta.directory_id


def voters_of(quorum: Any) -> dict[int, tuple[uuid.UUID | None, list[tuple[str, str, int]]]]:
    """Each voter of a DescribeQuorum v2 answer: its directory id and its listeners."""
    [partition] = quorum.topics[0].partitions
    assert quorum.error_code == 0 and partition.error_code == 0
    listeners = {
        n.node_id: [(e.name, e.host, int(e.port)) for e in n.listeners] for n in quorum.nodes
    }
    return {
        v.replica_id: (v.replica_directory_id, listeners.get(v.replica_id, []))
        for v in partition.current_voters
    }


def test_three_combined_nodes_form_a_dynamic_quorum(
    tmp_path: Path, nodes: list[BrokerProcess]
) -> None:
    ports = controller_ports([1, 2, 3])
    ids = {i: random_directory_id() for i in ports}
    initial = ",".join(f"{i}@127.0.0.1:{ports[i]}:{uuid_to_kafka_str(ids[i])}" for i in ports)
    # A shorter broker session than the default 9 s: the killed node's broker is fenced,
    # and left out of clients' metadata, sooner.
    session = {"broker.session.timeout.ms": 5000, "broker.heartbeat.interval.ms": 1000}
    nodes.extend(
        kraft_node(
            tmp_path, i, ports, overrides=session, format_args=["--initial-controllers", initial]
        )
        for i in ports
    )
    for node in nodes:
        assert "controller.quorum.voters" not in node.overrides
        # Format gave each metadata dir the directory id the voters name for it, and
        # wrote the bootstrap snapshot with the voters beside the metadata log.
        assert metadata_directory_id(node) == ids[int(str(node.overrides["node.id"]))]
        assert (metadata_partition_dir(node) / BOOTSTRAP_SNAPSHOT).is_file()
    # Voters start together: each waits for a quorum before its broker registers.
    for node in nodes:
        node.launch()
    for node in nodes:
        node.wait_started(90)
    bootstrap = ",".join(n.bootstrap for n in nodes)
    create_topic(bootstrap, NewTopic("replicated", 3, 3))
    produce_numbered(bootstrap, "replicated", 300)

    # kraft.version 1: the voters carry their directory ids and controller endpoints,
    # and quorum-state is written in data_version 1.
    expected = {i: (ids[i], [("CONTROLLER", "127.0.0.1", ports[i])]) for i in ports}
    assert voters_of(describe_quorum(nodes[0])) == expected
    assert {quorum_state(node)["data_version"] for node in nodes} == {1}

    # The active controller SIGKILLed: its partners elect one of them and keep
    # serving, metadata changes included; nothing acknowledged is lost.
    before = quorum_leader(ports)
    active = nodes[before.leader_id - 1]
    active.kill()
    survivors = [n for n in nodes if n is not active]
    others = {i: p for i, p in ports.items() if i != before.leader_id}
    after = quorum_leader(others)
    assert after.leader_id != before.leader_id and after.leader_epoch > before.leader_epoch
    survivors_bootstrap = ",".join(n.bootstrap for n in survivors)
    # Once its broker is fenced (a session after its last heartbeat), clients no longer
    # pick the dead node as the one to send admin requests to.
    admin = AdminClient({"bootstrap.servers": survivors_bootstrap})
    deadline = time.monotonic() + 60
    while before.leader_id in admin.list_topics(timeout=10).brokers:
        assert time.monotonic() < deadline, "the killed node's broker was not fenced"
        time.sleep(0.2)
    create_topic(survivors_bootstrap, NewTopic("after", 1, 2))
    produce_numbered(survivors_bootstrap, "replicated", 100, start=300)
    assert len(consume_values(survivors_bootstrap, "replicated", 400, "g")) == 400
    assert voters_of(describe_quorum(survivors[0])) == expected


def test_a_standalone_node_is_a_single_node_cluster(
    tmp_path: Path, nodes: list[BrokerProcess]
) -> None:
    node = kraft_node(tmp_path, 1, controller_ports([1]), format_args=["--standalone"])
    nodes.append(node)
    node.start(60)
    create_topic(node.bootstrap, NewTopic("events", 2, 1))
    produce_numbered(node.bootstrap, "events", 100)
    assert len(consume_values(node.bootstrap, "events", 100, "g1")) == 100
    [(voter_id, (directory_id, _))] = voters_of(describe_quorum(node)).items()
    assert (voter_id, directory_id) == (1, metadata_directory_id(node))
    # Restarted, it reads its voter set back (bootstrap snapshot and log) and leads
    # again at once.
    assert node.stop() == 0
    node.start(60)
    produce_numbered(node.bootstrap, "events", 50, start=100)
    assert len(consume_values(node.bootstrap, "events", 150, "g2")) == 150
    assert list(voters_of(describe_quorum(node))) == [1]


def test_a_broker_finds_a_dynamic_quorum_through_its_bootstrap_servers(
    tmp_path: Path, nodes: list[BrokerProcess]
) -> None:
    # A controller-only --standalone voter and a broker-only node formatted without any
    # quorum flag: the broker fetches the metadata log as an observer from the
    # bootstrap servers, and finds the active controller's endpoint in the voters the
    # log holds, to register with it and forward admin requests to.
    ports = controller_ports([1])
    controller = kraft_node(tmp_path, 1, ports, roles="controller", format_args=["--standalone"])
    broker = kraft_node(tmp_path, 2, ports, roles="broker", format_args=[])
    nodes.extend([controller, broker])
    assert not metadata_partition_dir(broker).exists()
    controller.launch()
    broker.start(60)
    create_topic(broker.bootstrap, NewTopic("observed", 1, 1))
    produce_numbered(broker.bootstrap, "observed", 20)
    assert len(consume_values(broker.bootstrap, "observed", 20, "g")) == 20
    quorum = describe_quorum(broker)
    assert list(voters_of(quorum)) == [1]
    [partition] = quorum.topics[0].partitions
    assert [o.replica_id for o in partition.observers] == [2]
    assert partition.observers[0].replica_directory_id == metadata_directory_id(broker)
