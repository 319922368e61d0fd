"""A multi-node Tiercel KRaft cluster of real processes, for the cluster and fault tests.

Each node is a `BrokerProcess` started from ``config/kraft/node-<n>.yaml`` (the same
files docker/docker-compose.yml mounts) with the addresses overridden: a ``127.0.0.1:0``
client listener, a controller listener on a port picked before the start (every voter's
address is in controller.quorum.voters), and its directories under the test's tmp dir,
formatted first with `tiercel storage format` as a user formats them. `TEST_OVERRIDES`
shortens the timeouts so that failures are detected within a test's time budget.

Two topologies, as Kafka 4 deploys them:
- combined (the default, as the example files and docker-compose): nodes 1..3 are each
  a broker and a voter of the controller quorum; nodes past 3 (a reassignment target,
  say) are brokers only. Killing a node kills a voter too.
- dedicated (``controllers=N``): N controller-only nodes, ids ``CONTROLLER_ID_BASE + i``,
  form the quorum; nodes 1..size are brokers only. A test that takes two of three
  brokers down still has a controller to elect leaders.

The test reads the cluster's state the way an operator would: through the wire (the
brokers' Metadata, which a KRaft broker answers from the metadata log it replicated;
DescribeQuorum, which a broker forwards to the active controller, as
kafka-metadata-quorum --bootstrap-server does), watermarks through librdkafka, and the
partition directories' files (segments, leader-epoch-checkpoint,
replication-offset-checkpoint) in Kafka's formats.

Faults are signals to one node's pid: `kill` (SIGKILL), `pause`/`resume` (SIGSTOP/
SIGCONT), `terminate` (SIGTERM, the controlled shutdown path); `start_broker` and
`restart` bring a node back on its ports with its directories.

Invariant checks: `assert_replicas_identical_below_hw` (every replica holds the same batch
bytes below the high watermark), `assert_epoch_checkpoints_identical` and
`wait_until_high_watermark_checkpointed`.

Segment batch framing read here (RecordBatch v2, Kafka's layout):

    base_offset             int64   at 0
    batch_length            int32   at 8    bytes after this field
    partition_leader_epoch  int32   at 12
    magic                   int8    at 16
    crc                     uint32  at 17
    attributes              int16   at 21
    last_offset_delta       int32   at 23
    ...                             12 + batch_length bytes in all
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import struct
import subprocess
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from support.broker import REPO, BrokerProcess
from support.kraft import (
    DESCRIBE_QUORUM,
    DESCRIBE_QUORUM_BODY,
    DESCRIBE_QUORUM_VERSIONS,
    format_command,
    kraft_node,
    request,
)
from support.ports import free_port

# Errors a leader change answers until librdkafka's metadata catches up.
_LEADERSHIP_MOVING: Final = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)

CLUSTER_CONFIG_DIR: Final = REPO / "config" / "kraft"
EXAMPLE_NODES: Final = 3
# Dedicated controllers' node ids: apart from the brokers' 1..size.
CONTROLLER_ID_BASE: Final = 100
# Short enough for failures to be noticed within a test, long enough for a loaded
# 2-core machine not to shrink ISRs spuriously (broker.session.timeout.ms is the
# config files' 9 s, Kafka's default).
TEST_OVERRIDES: Final[Mapping[str, object]] = {
    "replica.lag.time.max.ms": 5000,
    # 50 partitions times three replicas is a lot of replication for a test cluster.
    "offsets.topic.num.partitions": 5,
}
# As in conftest's broker_factory: a loop callback this slow stalled every client.
LOOP_BLOCKED_S: Final = 1.0

_BATCH_HEADER: Final = struct.Struct(">qi")  # base_offset, batch_length
_LAST_OFFSET_DELTA: Final = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT: Final = 23
_BATCH_OVERHEAD: Final = 12  # base_offset and batch_length precede the counted bytes
# A metadata read that waits longer (the node asked is stopped or the controller is
# being elected) counts as "not yet".
_REQUEST_TIMEOUT_S: Final = 5.0
_METADATA: Final = 3
_METADATA_VERSIONS: Final = (12, 12)
_SLOW_CALLBACK: Final = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z .*Executing <.*> took (\d+\.\d+) seconds"
)
_REGISTERED: Final = re.compile(r"event=broker_registered .*broker_epoch=(\d+)")


class NotYetError(Exception):
    """What was asked is not known yet (no node answered, or none could)."""


def cluster_config(node_id: int) -> Path:
    """The config file node ``node_id`` of the example cluster starts from."""
    return CLUSTER_CONFIG_DIR / f"node-{node_id}.yaml"


@dataclass(frozen=True, slots=True)
class PartitionStateView:
    """A partition's leadership as a broker's Metadata answers it (from the
    PartitionRecord/PartitionChangeRecords it replayed)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Batch:
    """One record batch of a replica's log, with its bytes exactly as stored."""

    base_offset: int
    last_offset: int
    data: bytes


def read_batches(partition_dir: Path) -> list[Batch]:
    """Every whole batch of a partition directory's segments, in offset order. A torn
    tail (a partial batch at the end of a segment) is left out, as recovery would."""
    batches: list[Batch] = []
    for segment in sorted(partition_dir.glob("*.log"), key=lambda p: int(p.stem)):
        data = segment.read_bytes()
        position = 0
        while position + _BATCH_HEADER.size <= len(data):
            base_offset, batch_length = _BATCH_HEADER.unpack_from(data, position)
            end = position + _BATCH_OVERHEAD + batch_length
            if batch_length < _LAST_OFFSET_DELTA_AT or end > len(data):
                break
            (delta,) = _LAST_OFFSET_DELTA.unpack_from(data, position + _LAST_OFFSET_DELTA_AT)
            batches.append(Batch(base_offset, base_offset + delta, data[position:end]))
            position = end
    return batches


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """A ``<version>\\n<count>\\n<topic> <partition> <offset>...`` checkpoint file, such as
    replication-offset-checkpoint (high watermarks)."""
    lines = path.read_text().splitlines()
    assert lines[0] == "0", f"{path}: unknown checkpoint version {lines[0]!r}"
    entries = {}
    for line in lines[2 : 2 + int(lines[1])]:
        topic, partition, offset = line.split()
        entries[(topic, int(partition))] = int(offset)
    return entries


def read_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    """leader-epoch-checkpoint: ``0\\n<count>\\n<epoch> <start offset>...``."""
    lines = path.read_text().splitlines()
    assert lines[0] == "0", f"{path}: unknown checkpoint version {lines[0]!r}"
    entries = []
    for line in lines[2 : 2 + int(lines[1])]:
        epoch, start_offset = line.split()
        entries.append((int(epoch), int(start_offset)))
    return entries


def _wait(
    condition: Callable[[], Any],
    timeout: float,
    what: str,
    failure: Callable[[], Exception] | None = None,
    interval: float = 0.1,
) -> Any:
    """Poll ``condition()`` until it returns something truthy, which is returned; a node
    briefly unreachable (being killed, paused or restarted) counts as not yet. On
    timeout, raises ``failure()`` (which can describe the state then), else a
    TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = condition()
        except NotYetError:
            result = None
        if result:
            return result
        if time.monotonic() >= deadline:
            if failure is not None:
                raise failure()
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def _ask(node: BrokerProcess, api_key: int, versions: tuple[int, int], body: Any) -> Any:
    """One request to a node's client listener; NotYetError when it does not answer."""
    try:
        return request(node.bootstrap, api_key, versions, body, _REQUEST_TIMEOUT_S)
    except (OSError, TimeoutError, EOFError) as e:
        raise NotYetError(f"{node.bootstrap}: {e!r}") from e


class ClusterProcess:
    """Nodes of a KRaft cluster as processes, and a reader of its metadata.

    Invariants: ``nodes`` maps node id to its `BrokerProcess` for the cluster's whole
    life (a killed node keeps its ports and directories for `start_broker`);
    ``brokers`` is the subset with the broker role, ``controllers`` the dedicated
    controllers; every pause is recorded so that the blocked-loop check does not count
    a stopped process's time. Not thread-safe: the test thread drives it.
    """

    def __init__(
        self,
        directory: Path,
        size: int = 3,
        overrides: Mapping[str, object] | None = None,
        broker_overrides: Mapping[int, Mapping[str, object]] | None = None,
        controllers: int = 0,
        extra_listeners: Sequence[str] = (),
    ) -> None:
        self.directory = directory
        if controllers:
            voters = [CONTROLLER_ID_BASE + i for i in range(1, controllers + 1)]
        else:
            voters = list(range(1, min(size, EXAMPLE_NODES) + 1))
        self.voters: dict[int, int] = {node: free_port() for node in voters}
        self.nodes: dict[int, BrokerProcess] = {}
        for node in [*voters, *range(1, size + 1)]:
            if node in self.nodes:
                continue
            roles = [
                role
                for role, has in (("broker", node <= size), ("controller", node in self.voters))
                if has
            ]
            self.nodes[node] = kraft_node(
                directory,
                node,
                self.voters,
                ",".join(roles),
                {**TEST_OVERRIDES, **(overrides or {}), **(broker_overrides or {}).get(node, {})},
                formatted=False,
                # Nodes other than the example's three start from node-1.yaml: node.id,
                # the roles and the addresses are overridden anyway.
                config_file=cluster_config(node if 1 <= node <= EXAMPLE_NODES else 1),
                extra_listeners=extra_listeners,
            )
        self.brokers: dict[int, BrokerProcess] = {
            n: p for n, p in self.nodes.items() if p.is_broker
        }
        self.controllers: dict[int, BrokerProcess] = {
            n: p for n, p in self.nodes.items() if not p.is_broker
        }
        # Wall-clock (pause, resume) times per node; resume is None while paused.
        self._pauses: dict[int, list[tuple[float, float | None]]] = {n: [] for n in self.nodes}
        self._formatted = False

    # --- lifecycle ----------------------------------------------------------------------

    def format(self, extra: Sequence[str] = ()) -> None:
        """`tiercel storage format` on every node, in parallel (each is a process start),
        with ``extra`` arguments (--add-scram ...)."""
        runs = [
            (
                node,
                subprocess.Popen(
                    format_command(node, extra=extra),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                ),
            )
            for node in self.nodes.values()
        ]
        for node, run in runs:
            _, stderr = run.communicate(timeout=120)
            if run.returncode != 0:
                raise RuntimeError(f"format of {node.data_dir} failed: {stderr.decode()}")
        self._formatted = True

    def start(self, timeout: float = 60.0) -> ClusterProcess:
        """Format, start every node (the voters together: a quorum needs a majority to
        elect a leader before any broker can register) and wait until every broker is
        registered and unfenced."""
        if not self._formatted:
            self.format()
        for node in self.nodes.values():
            node.launch()
        for node in self.nodes.values():
            node.wait_started(timeout)
        self.wait_for_brokers(self.brokers, timeout)
        self.wait_for_controller(timeout=timeout)
        return self

    def start_broker(self, node: int, timeout: float = 60.0) -> BrokerProcess:
        """Start a node that was killed or terminated; waits until, as a broker, it is
        registered and unfenced again."""
        process = self.nodes[node].start(timeout)
        if process.is_broker:
            self.wait_for_brokers([node], timeout)
        return process

    def restart(self, node: int, timeout: float = 60.0) -> BrokerProcess:
        """SIGTERM (controlled shutdown), wait for the exit, start again."""
        self.terminate(node, timeout)
        return self.start_broker(node, timeout)

    def kill(self, node: int) -> None:
        """SIGKILL: a crash. The controller fences the broker once its heartbeats have
        been missing for broker.session.timeout.ms."""
        self.nodes[node].kill()
        self._end_pause(node)

    def terminate(self, node: int, timeout: float = 60.0) -> int:
        """SIGTERM and wait for the exit (a clean, controlled shutdown); the exit code."""
        if self.is_paused(node):
            self.resume(node)
        return self.nodes[node].stop(timeout)

    def pause(self, node: int) -> None:
        """SIGSTOP: the process stops answering (like a long GC pause or a hung host)
        while its connections stay open; it misses its heartbeats and fetches."""
        proc = self.nodes[node].proc
        assert proc is not None and proc.poll() is None, f"node {node} is not running"
        os.kill(proc.pid, signal.SIGSTOP)
        self._pauses[node].append((time.time(), None))

    def resume(self, node: int) -> None:
        """SIGCONT after `pause`."""
        proc = self.nodes[node].proc
        assert proc is not None and self.is_paused(node), f"node {node} is not paused"
        os.kill(proc.pid, signal.SIGCONT)
        self._end_pause(node)

    def is_paused(self, node: int) -> bool:
        pauses = self._pauses[node]
        return bool(pauses) and pauses[-1][1] is None

    def _end_pause(self, node: int) -> None:
        if self.is_paused(node):
            paused_at, _ = self._pauses[node][-1]
            self._pauses[node][-1] = (paused_at, time.time())

    def close(self) -> None:
        """Kill every node."""
        for node in self.nodes:
            self.kill(node)

    def running(self) -> list[int]:
        """Node ids of the brokers whose process is alive (paused ones included)."""
        return [node for node, broker in self.brokers.items() if broker.running]

    def bootstrap(self, nodes: Collection[int] | None = None) -> str:
        """bootstrap.servers naming ``nodes`` (default: every running, unpaused broker)."""
        chosen = nodes if nodes is not None else self.running()
        return ",".join(
            self.brokers[n].bootstrap
            for n in chosen
            if self.brokers[n].port is not None and not self.is_paused(n)
        )

    def blocked_loop_reports(self, threshold_s: float = LOOP_BLOCKED_S) -> list[str]:
        """asyncio debug mode's slow-callback lines of ``threshold_s`` or more, not counting
        time a node spent stopped by `pause` (a callback running at the SIGSTOP is
        reported with the pause included)."""
        reports = []
        for node, process in self.nodes.items():
            for line in process.log_text().splitlines():
                match = _SLOW_CALLBACK.search(line)
                if match is None:
                    continue
                ended = (
                    datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S.%f")
                    .replace(tzinfo=UTC)
                    .timestamp()
                )
                took = float(match.group(2))
                if took - self._paused_within(node, ended - took, ended) >= threshold_s:
                    reports.append(f"node {node}: {line}")
        return reports

    def _paused_within(self, node: int, start: float, end: float) -> float:
        # Log timestamps have millisecond precision: widen the window by that much.
        start, end = start - 0.01, end + 0.01
        paused = 0.0
        for paused_at, resumed_at in self._pauses[node]:
            resumed = resumed_at if resumed_at is not None else time.time()
            paused += max(0.0, min(end, resumed) - max(start, paused_at))
        return paused

    # --- metadata view ------------------------------------------------------------------

    def _answering(self) -> list[BrokerProcess]:
        """The brokers a metadata read may ask, lowest node id first."""
        return [
            process
            for node, process in self.brokers.items()
            if process.running and process.port is not None and not self.is_paused(node)
        ]

    def _ask_any(self, api_key: int, versions: tuple[int, int], body: Any) -> Any:
        """The first answer of a running, unpaused broker. Every broker replays the same
        metadata log, one of them perhaps a moment behind: callers poll."""
        for process in self._answering():
            try:
                return _ask(process, api_key, versions, body)
            except NotYetError:
                continue
        raise NotYetError("no broker answered")

    def _metadata(
        self, topics: Collection[str] | None = (), broker: BrokerProcess | None = None
    ) -> Any:
        """A Metadata v12 response for ``topics`` (None: every topic), from ``broker``
        or else from any."""
        body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        if broker is not None:
            return _ask(broker, _METADATA, _METADATA_VERSIONS, body)
        return self._ask_any(_METADATA, _METADATA_VERSIONS, body)

    def _topic(self, topic: str, broker: BrokerProcess | None = None) -> Any | None:
        """The topic's Metadata entry, None while the broker asked does not know it."""
        (entry,) = self._metadata([topic], broker).topics
        return None if entry.error_code != 0 else entry

    def registered_brokers(self) -> set[int]:
        """Brokers the metadata names alive: registered and unfenced (a killed broker
        stays until its session times out and the controller fences it)."""
        return {int(b.node_id) for b in self._metadata().brokers}

    def broker_epoch(self, node: int) -> int | None:
        """The broker epoch the controller gave broker ``node`` at its latest
        registration (the RegisterBrokerRecord's offset), from the broker's own log;
        None before it registered in its current run."""
        found = _REGISTERED.findall(self.nodes[node].tail(lines=10**9))
        return int(found[-1]) if found else None

    def wait_for_brokers(self, nodes: Collection[int], timeout: float = 60.0) -> None:
        wanted = set(nodes)
        _wait(lambda: wanted <= self.registered_brokers(), timeout, f"brokers {wanted}")

    def wait_until_fenced(self, node: int, timeout: float = 30.0) -> None:
        """Until broker ``node`` is fenced (its session expired or it shut down)."""
        _wait(
            lambda: node not in self.registered_brokers(),
            timeout,
            f"broker {node} to be fenced",
        )

    def controller(self) -> int | None:
        """The active controller's node id (the quorum's leader, by DescribeQuorum
        through a broker), or None while there is none."""
        response = self._ask_any(DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSIONS, DESCRIBE_QUORUM_BODY)
        if response.error_code != 0:
            return None
        (state,) = response.topics[0].partitions
        leader = int(state.leader_id)
        return leader if state.error_code == 0 and leader >= 0 else None

    def wait_for_controller(self, exclude: Collection[int] = (), timeout: float = 60.0) -> int:
        """The active controller's id once one not in ``exclude`` is elected."""

        def elected() -> int | None:
            controller = self.controller()
            return controller if controller is not None and controller not in exclude else None

        result: int = _wait(elected, timeout, f"a controller not in {set(exclude)}")
        return result

    def assignment(self, topic: str) -> dict[int, tuple[int, ...]]:
        """Partition → replicas, in the assignment's order."""
        entry = _wait(lambda: self._topic(topic), _REQUEST_TIMEOUT_S, f"topic {topic}")
        return {int(p.partition_index): tuple(p.replica_nodes) for p in entry.partitions}

    def partition_state(
        self, topic: str, partition: int, broker: BrokerProcess | None = None
    ) -> PartitionStateView | None:
        """The partition's leadership as ``broker`` (else any broker) knows it, None while
        the broker asked does not know it."""
        entry = self._topic(topic, broker)
        if entry is None:
            return None
        for state in entry.partitions:
            if state.partition_index == partition:
                return PartitionStateView(
                    leader=int(state.leader_id),
                    leader_epoch=int(state.leader_epoch),
                    isr=tuple(state.isr_nodes),
                    replicas=tuple(state.replica_nodes),
                )
        return None

    def leader_of(self, topic: str, partition: int) -> int:
        """The current leader per the metadata (-1: none)."""
        state = _wait(
            lambda: self.partition_state(topic, partition),
            _REQUEST_TIMEOUT_S,
            f"{topic}-{partition}",
        )
        return int(state.leader)

    def wait_for_leader(
        self, topic: str, partition: int, exclude: Collection[int] = (), timeout: float = 30.0
    ) -> PartitionStateView:
        """The partition state once it names a leader not in ``exclude``."""

        def elected() -> PartitionStateView | None:
            state = self.partition_state(topic, partition)
            ok = state is not None and state.leader >= 0 and state.leader not in exclude
            return state if ok else None

        result: PartitionStateView = _wait(
            elected, timeout, f"a leader of {topic}-{partition} not in {set(exclude)}"
        )
        return result

    def wait_until_isr(
        self, topic: str, partition: int, expected: Collection[int], timeout: float = 30.0
    ) -> PartitionStateView:
        """The partition state once its ISR is exactly ``expected`` in the metadata of
        every broker that answers (a killed one does not). A broker just resumed from a
        pause still answers with the state from before it, which may be the one expected
        (a follower back in the ISR it was in when paused), until it has replayed the
        metadata log."""
        wanted = set(expected)

        def reached() -> PartitionStateView | None:
            states = []
            for broker in self._answering():
                with contextlib.suppress(NotYetError):
                    states.append(self.partition_state(topic, partition, broker))
            if not states or any(s is None or set(s.isr) != wanted for s in states):
                return None
            return states[0]

        def failure() -> Exception:
            return TimeoutError(
                f"ISR of {topic}-{partition} is not {sorted(wanted)} after {timeout}s: "
                f"{self.partition_state(topic, partition)}"
            )

        result: PartitionStateView = _wait(reached, timeout, "", failure)
        return result

    # --- client view ---------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 3,
        config: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """CreateTopics through librdkafka, then wait until every partition has a leader
        and its whole replica set in the ISR."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap()})
        topic = NewTopic(name, partitions, replication_factor, config=dict(config or {}))
        admin.create_topics([topic], operation_timeout=timeout)[name].result(timeout)
        for partition, replicas in _wait(
            lambda: self._full_assignment(name, partitions), timeout, f"topic {name}"
        ).items():
            self.wait_for_leader(name, partition, timeout=timeout)
            self.wait_until_isr(name, partition, replicas, timeout)

    def _full_assignment(self, topic: str, partitions: int) -> dict[int, tuple[int, ...]]:
        entry = self._topic(topic)
        if entry is None or len(entry.partitions) != partitions:
            return {}
        return {int(p.partition_index): tuple(p.replica_nodes) for p in entry.partitions}

    def high_watermark(self, topic: str, partition: int, timeout: float = 10.0) -> int:
        """The leader's high watermark, asked through librdkafka (ListOffsets latest).

        Right after a leader change librdkafka may still ask the old leader, which
        answers NOT_LEADER_OR_FOLLOWER, as Kafka's would; get_watermark_offsets hands
        that back without retrying (it refreshes its metadata), so a retriable error is
        asked again until ``timeout``."""
        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap(), "group.id": "tiercel-cluster-watermarks"}
        )
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = max(deadline - time.monotonic(), 0.1)
                try:
                    _, high = consumer.get_watermark_offsets(
                        CTopicPartition(topic, partition), timeout=left, cached=False
                    )
                    return int(high)
                except KafkaException as e:
                    error = e.args[0]
                    moved = error.code() in _LEADERSHIP_MOVING or error.retriable()
                    if not moved or time.monotonic() >= deadline:
                        raise
                    time.sleep(0.2)
        finally:
            consumer.close()

    # --- files --------------------------------------------------------------------------

    def partition_dir(self, node: int, topic: str, partition: int) -> Path:
        return self.brokers[node].log_dir / f"{topic}-{partition}"

    def batches(self, node: int, topic: str, partition: int) -> list[Batch]:
        return read_batches(self.partition_dir(node, topic, partition))

    def epoch_entries(self, node: int, topic: str, partition: int) -> list[tuple[int, int]]:
        """Broker ``node``'s leader-epoch-checkpoint for the partition ([] when absent)."""
        path = self.partition_dir(node, topic, partition) / "leader-epoch-checkpoint"
        return read_epoch_checkpoint(path) if path.exists() else []

    def checkpointed_high_watermark(self, node: int, topic: str, partition: int) -> int | None:
        """The partition's offset in ``node``'s replication-offset-checkpoint, as last
        written (every replica.high.watermark.checkpoint.interval.ms and at a clean stop)."""
        path = self.brokers[node].log_dir / "replication-offset-checkpoint"
        if not path.exists():
            return None
        return read_offset_checkpoint(path).get((topic, partition))

    def wait_until_high_watermark_checkpointed(
        self,
        topic: str,
        partition: int,
        high_watermark: int,
        nodes: Collection[int] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Until every replica's replication-offset-checkpoint holds ``high_watermark``
        for the partition. A follower learns the HW from its next fetch response and
        checkpoints it every replica.high.watermark.checkpoint.interval.ms (5 s)."""
        replicas = sorted(nodes if nodes is not None else self.assignment(topic)[partition])

        def checkpointed() -> bool:
            return all(
                self.checkpointed_high_watermark(n, topic, partition) == high_watermark
                for n in replicas
            )

        def failure() -> Exception:
            found = {n: self.checkpointed_high_watermark(n, topic, partition) for n in replicas}
            return AssertionError(
                f"{topic}-{partition}: checkpointed high watermarks {found} are not "
                f"{high_watermark} after {timeout}s"
            )

        _wait(checkpointed, timeout, "", failure)

    def assert_replicas_identical_below_hw(
        self,
        topic: str,
        partition: int,
        high_watermark: int | None = None,
        nodes: Collection[int] | None = None,
        timeout: float = 30.0,
    ) -> int:
        """Every replica's log holds the same batches, byte for byte, below the high
        watermark (the leader's, asked with `high_watermark`, unless given). Waits up to
        ``timeout`` for replicas still catching up; ``nodes`` defaults to the replica
        set. The batch holding offset HW-1 must end there: HW is a log end offset of
        every ISR member, and followers append whole batches. Returns the HW."""
        hw = self.high_watermark(topic, partition) if high_watermark is None else high_watermark
        replicas = sorted(nodes if nodes is not None else self.assignment(topic)[partition])
        logs: dict[int, list[Batch]] = {}

        def below_hw(node: int) -> list[Batch] | None:
            batches = [b for b in self.batches(node, topic, partition) if b.base_offset < hw]
            reached = hw == 0 or (bool(batches) and batches[-1].last_offset >= hw - 1)
            return batches if reached else None

        def all_reached() -> bool:
            for node in replicas:
                if node not in logs and (batches := below_hw(node)) is not None:
                    logs[node] = batches
            return len(logs) == len(replicas)

        def failure() -> Exception:
            behind = {n: self._log_end(n, topic, partition) for n in replicas if n not in logs}
            return AssertionError(
                f"{topic}-{partition}: replicas {behind} (log end offsets) did not reach "
                f"HW {hw} within {timeout}s"
            )

        _wait(all_reached, timeout, "", failure)
        for node, batches in logs.items():
            if batches:
                assert batches[-1].last_offset == hw - 1, (
                    f"{topic}-{partition}: broker {node}'s batch at {batches[-1].base_offset} "
                    f"runs to {batches[-1].last_offset}, across HW {hw}"
                )
        # Retention may have moved log starts apart: compare from the latest start.
        start = max((b[0].base_offset for b in logs.values() if b), default=0)
        reference_node = replicas[0]
        reference = [b for b in logs[reference_node] if b.base_offset >= start]
        for node in replicas[1:]:
            other = [b for b in logs[node] if b.base_offset >= start]
            _assert_same_batches(topic, partition, reference_node, reference, node, other)
        return hw

    def _log_end(self, node: int, topic: str, partition: int) -> int:
        batches = self.batches(node, topic, partition)
        return batches[-1].last_offset + 1 if batches else 0

    def assert_epoch_checkpoints_identical(
        self,
        topic: str,
        partition: int,
        nodes: Collection[int] | None = None,
        timeout: float = 30.0,
    ) -> list[tuple[int, int]]:
        """Every replica's leader-epoch-checkpoint holds the same entries (waiting up to
        ``timeout`` for them to converge); returns them."""
        replicas = sorted(nodes if nodes is not None else self.assignment(topic)[partition])

        def with_records(node: int) -> list[tuple[int, int]]:
            # A leader records its epoch when elected (Kafka too); its followers learn
            # it with the epoch's first batch, so an epoch without records yet differs.
            end = self._log_end(node, topic, partition)
            return [
                (e, start) for e, start in self.epoch_entries(node, topic, partition) if start < end
            ]

        def converged() -> bool:
            entries = [with_records(n) for n in replicas]
            return all(e == entries[0] for e in entries)

        def failure() -> Exception:
            found = {n: self.epoch_entries(n, topic, partition) for n in replicas}
            return AssertionError(
                f"{topic}-{partition}: leader-epoch-checkpoint differs between replicas "
                f"after {timeout}s: {found}"
            )

        _wait(converged, timeout, "", failure)
        return self.epoch_entries(replicas[0], topic, partition)


def _assert_same_batches(
    topic: str,
    partition: int,
    node_a: int,
    batches_a: list[Batch],
    node_b: int,
    batches_b: list[Batch],
) -> None:
    for a, b in zip(batches_a, batches_b, strict=False):
        assert (a.base_offset, a.last_offset) == (b.base_offset, b.last_offset), (
            f"{topic}-{partition}: broker {node_a} has a batch at {a.base_offset}..."
            f"{a.last_offset} where broker {node_b} has {b.base_offset}..{b.last_offset}"
        )
        assert a.data == b.data, (
            f"{topic}-{partition}: batch {a.base_offset}..{a.last_offset} differs between "
            f"brokers {node_a} and {node_b}"
        )
    assert len(batches_a) == len(batches_b), (
        f"{topic}-{partition}: broker {node_a} has {len(batches_a)} batches below the HW, "
        f"broker {node_b} {len(batches_b)}"
    )


@pytest.fixture
def cluster_factory(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., ClusterProcess]]:
    """Start clusters with ``factory(size=3, overrides=None, broker_overrides=None,
    controllers=0, start=True, extra_listeners=())`` (see `ClusterProcess` for the
    topologies; ``extra_listeners`` are served by every broker). Every node is
    killed at teardown, and the test fails if a node's event loop was blocked for a
    second."""
    clusters: list[ClusterProcess] = []

    def factory(
        size: int = 3,
        overrides: Mapping[str, object] | None = None,
        broker_overrides: Mapping[int, Mapping[str, object]] | None = None,
        controllers: int = 0,
        start: bool = True,
        extra_listeners: Sequence[str] = (),
    ) -> ClusterProcess:
        cluster = ClusterProcess(
            tmp_path / f"cluster{len(clusters)}",
            size,
            overrides,
            broker_overrides,
            controllers,
            extra_listeners,
        )
        clusters.append(cluster)
        return cluster.start() if start else cluster

    yield factory
    for cluster in clusters:
        cluster.close()
    blocked = [line for cluster in clusters for line in cluster.blocked_loop_reports()]
    assert not blocked, "event loop blocked:\n" + "\n".join(blocked)


@pytest.fixture
def cluster(cluster_factory: Callable[..., ClusterProcess]) -> ClusterProcess:
    """Three running combined nodes of the example cluster, a controller elected."""
    return cluster_factory()
