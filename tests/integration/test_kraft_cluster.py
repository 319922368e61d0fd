"""KRaft nodes as users run them: directories formatted with `tiercel storage format`,
`tiercel broker` with process.roles. A combined node serves clients alone (admin
requests forwarded to its controller, consumer groups, a restart that registers again
at once); an unformatted node refuses to start with Kafka's message; three combined
nodes replicate a topic and survive the SIGKILL of one of them: its leaderships move to
the others, a controller is elected again, and nothing acknowledged is lost."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from support.broker import BrokerProcess
from support.clients import consume_values, produce_numbered
from support.kraft import controller_ports, describe_quorum, format_node, kraft_node


@pytest.fixture
def nodes() -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    for node in started:
        node.kill()


def create_topic(bootstrap: str, topic: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([topic])[topic.topic].result(60)


def test_a_combined_node_serves_alone(tmp_path: Path, nodes: list[BrokerProcess]) -> None:
    # The metadata log in the log dir, as metadata.log.dir's default puts it: it is
    # Raft's, never a partition of the log manager (once deleted as a stray).
    node = kraft_node(tmp_path, 1, controller_ports([1]), own_metadata_dir=False)
    nodes.append(node)
    node.start()
    # CreateTopics goes to the broker, which forwards it to the controller (KIP-590).
    create_topic(node.bootstrap, NewTopic("events", 3, 1))
    produce_numbered(node.bootstrap, "events", 200)
    assert len(consume_values(node.bootstrap, "events", 200, "g1")) == 200
    metadata_log = node.log_dir / "__cluster_metadata-0"
    assert metadata_log.is_dir()
    # A clean stop fenced the broker: it registers again at once, not after a session
    # (9 s). Timed in the node's own log, from its first line to broker_started: the
    # process's imports before it take longer than a session on a loaded machine.
    assert node.stop() == 0
    node.start()
    restart = node.log_text().rsplit("---- start #2 ----", 1)[1].splitlines()[1:]
    started_line = next(line for line in restart if "event=broker_started" in line)
    assert logged_at(started_line) - logged_at(restart[0]) < timedelta(seconds=8)
    produce_numbered(node.bootstrap, "events", 50, start=200)
    assert len(consume_values(node.bootstrap, "events", 250, "g2")) == 250
    assert metadata_log.is_dir()
    assert "log_deleted partition=__cluster_metadata" not in node.log_text()


def logged_at(line: str) -> datetime:
    """When a broker logged ``line`` (its first field, 2026-11-28T11:42:30.544Z)."""
    return datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ")


def test_an_unformatted_node_refuses_to_start(tmp_path: Path) -> None:
    node = kraft_node(tmp_path, 1, controller_ports([1]), formatted=False)
    assert "No readable meta.properties files found." in refusal(node)
    # Formatted, then given a log dir formatting never saw (Kafka's initializeLogDirs).
    format_node(node)
    added = tmp_path / "added"
    node.overrides["log.dirs"] = f"{node.overrides['log.dirs']},{added}"
    assert (
        f"No `meta.properties` found in {added} (have you run `tiercel storage format` to "
        "format the directory?)"
    ) in refusal(node)


def refusal(node: BrokerProcess) -> str:
    """What the node says when it exits at start-up (exit code 1)."""
    result = subprocess.run(node.command(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    return result.stdout + result.stderr


def test_three_combined_nodes_survive_a_killed_node(
    tmp_path: Path, nodes: list[BrokerProcess]
) -> None:
    ports = controller_ports([1, 2, 3])
    nodes.extend(kraft_node(tmp_path, i, ports) for i in (1, 2, 3))
    # Voters start together: each waits for a quorum before its broker registers.
    for node in nodes:
        node.launch()
    for node in nodes:
        node.wait_started(60)
    bootstrap = ",".join(n.bootstrap for n in nodes)
    create_topic(bootstrap, NewTopic("replicated", 3, 3))
    quorum = describe_quorum(nodes[2])
    [partition] = quorum.topics[0].partitions
    assert quorum.error_code == 0 and partition.error_code == 0
    assert partition.leader_id in (1, 2, 3) and partition.high_watermark > 0
    assert sorted(v.replica_id for v in partition.current_voters) == [1, 2, 3]
    assert {n.node_id for n in quorum.nodes} == {1, 2, 3}

    # The active controller stopped cleanly hands its leadership over before its
    # controller listener closes, so it hears its successor at once (Kafka's
    # ensureNotRaftLeader) instead of waiting out the handover's timeout.
    active = nodes[partition.leader_id - 1]
    started = time.monotonic()
    assert active.stop() == 0
    assert time.monotonic() - started < 15
    assert "graceful shutdown timed out" not in active.log_text()
    other = next(n for n in nodes if n is not active)
    deadline = time.monotonic() + 30
    while describe_quorum(other).topics[0].partitions[0].leader_id in (-1, partition.leader_id):
        assert time.monotonic() < deadline, "no new active controller"
        time.sleep(0.2)
    active.start(60)
    produce_numbered(bootstrap, "replicated", 500)

    nodes[0].kill()
    survivors = ",".join(n.bootstrap for n in nodes[1:])
    admin = AdminClient({"bootstrap.servers": survivors})
    deadline = time.monotonic() + 60
    while True:
        partitions = admin.list_topics("replicated", timeout=10).topics["replicated"].partitions
        if all(p.leader in (2, 3) and 1 not in p.isrs for p in partitions.values()):
            break
        assert time.monotonic() < deadline, f"leaderships did not move: {partitions}"
        time.sleep(0.2)
    # A controller leads again: a new topic can be created, and nothing acknowledged
    # before the kill is lost.
    create_topic(survivors, NewTopic("after", 1, 2))
    produce_numbered(survivors, "replicated", 100, start=500)
    assert len(consume_values(survivors, "replicated", 600, "g")) == 600


def test_a_broker_only_node_needs_no_bootstrap_checkpoint(
    tmp_path: Path, nodes: list[BrokerProcess]
) -> None:
    # The bootstrap metadata is the controller's alone (Kafka's KafkaRaftServer hands it
    # to the ControllerServer only): a broker-only node formatted, its
    # bootstrap.checkpoint then removed, joins a controller-only node and serves; so
    # does one whose file is corrupt, which it never reads.
    ports = controller_ports([1])
    controller = kraft_node(tmp_path, 1, ports, roles="controller")
    broker = kraft_node(tmp_path, 2, ports, roles="broker")
    nodes.extend([controller, broker])
    bootstrap_file = broker.data_dir / "metadata" / "bootstrap.checkpoint"
    bootstrap_file.unlink()
    controller.launch()
    broker.start(60)
    create_topic(broker.bootstrap, NewTopic("served", 1, 1))
    produce_numbered(broker.bootstrap, "served", 20)
    assert broker.stop() == 0
    bootstrap_file.write_bytes(b"not a checkpoint")
    broker.start(60)
    produce_numbered(broker.bootstrap, "served", 20, start=20)
