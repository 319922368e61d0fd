"""The quorum controller's event handling against a model (issue 18, item 5): random
sequences of broker registrations, heartbeats (some naming failed log directories),
replicas assigned to directories, session expiry, topic creation and deletion, new
partitions, unclean election settings, AlterPartition, elections, reassignments, held
commits, leader changes and standbys reloaded from snapshots run against two
QuorumControllers on an in-memory Raft quorum, and after every step:

- every partition's leader is in its ISR, an unfenced broker, and its replica's
  directory is online, or there is none; the ISR is never empty while there is a
  leader, and both are within the replicas;
- partition and leader epochs never go backwards;
- the topics are the model's: those whose creation was acknowledged and whose deletion
  was not;
- replaying the committed records from scratch, or from a snapshot taken earlier and
  then the records after it, gives each controller's committed state;
- a controller that is not active has its committed state and nothing else.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

from control_manager_support import MockTime, controller_config, registration
from fake_raft import FakeRaftQuorum, FakeSnapshot, new_controller, settle
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tiercel.protocol.errors import KafkaError
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.controller.configuration_control_manager import (
    ConfigResource,
    ConfigResourceType,
    OpType,
)
from tiercel.server.controller.control_managers import ControlManagers
from tiercel.server.controller.controller_requests import (
    AlterPartitionData,
    BrokerHeartbeatRequest,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsTopic,
    DirectoryAssignment,
    ElectionType,
)
from tiercel.server.controller.quorum_controller import QuorumController
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch

BROKERS = st.integers(1, 3)
TOPICS = st.sampled_from(["a", "b", "c"])
NODES = (0, 1)
# Sessions end only when a rule says so, never while the event loop runs a step.
SESSION_MS = 10**9
# Which of a broker's two log directories a rule names.
DIRECTORY = st.sampled_from((0, 1))


def dirs(broker: int) -> tuple[uuid.UUID, uuid.UUID]:
    return uuid.UUID(int=(broker << 64) + 1000), uuid.UUID(int=(broker << 64) + 2000)


def replay(records: list[tuple[int, ApiMessageAndVersion]]) -> ControlManagers:
    state = ControlManagers(controller_config(), MockTime(), random.Random(0))
    for offset, record in records:
        state.replay(record.message, offset)
    return state


class QuorumControllerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.time = MockTime()
        self.quorum = FakeRaftQuorum(auto_commit=True)
        self.controllers: dict[int, QuorumController] = {}
        for node in NODES:
            self.controllers[node] = self.run(self._start(node))
        self.quorum.elect(0)
        self.settle()
        self.pending: list[asyncio.Task[Any]] = []
        self.topics: set[str] = set()
        self.epochs: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
        self.snapshot: tuple[int, list[ApiMessageAndVersion]] | None = None
        self.incarnations = 100

    async def _start(self, node: int) -> QuorumController:
        return new_controller(self.quorum, node, time=self.time, session_timeout_ms=SESSION_MS)

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coroutine)

    def settle(self) -> None:
        for controller in self.controllers.values():
            self.run(settle(controller))
        done = [t for t in getattr(self, "pending", []) if t.done()]
        for task in done:
            self.pending.remove(task)
            error = task.exception()
            assert error is None or isinstance(error, KafkaError), repr(error)

    @property
    def active(self) -> QuorumController | None:
        return next((c for c in self.controllers.values() if c.is_active), None)

    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        self.pending.append(self.loop.create_task(coroutine))
        self.settle()

    # -- rules ----------------------------------------------------------------------

    @initialize(running=st.lists(BROKERS, unique=True))
    def start_brokers(self, running: list[int]) -> None:
        """Some brokers already run, so that topics are often created and their
        partitions changed, and every rule can act on them from the first step."""
        for broker in running:
            self.start_broker(broker)

    @precondition(lambda self: self.active is not None)
    @rule(broker=BROKERS, new_incarnation=st.booleans())
    def register(self, broker: int, new_incarnation: bool) -> None:
        assert self.active is not None
        if new_incarnation:
            self.incarnations += 1
        incarnation = uuid.UUID(int=self.incarnations if new_incarnation else broker + 1)
        request = replace(registration(broker, incarnation=incarnation), log_dirs=dirs(broker))
        self.submit(self.active.register_broker(request))

    @precondition(lambda self: self.active is not None)
    @rule(
        broker=BROKERS,
        caught_up=st.booleans(),
        fence=st.booleans(),
        shut_down=st.booleans(),
        offline=st.none() | DIRECTORY,
    )
    def heartbeat(
        self, broker: int, caught_up: bool, fence: bool, shut_down: bool, offline: int | None
    ) -> None:
        active = self.active
        assert active is not None
        registered = active.state.cluster.registration(broker)
        if registered is None:
            return
        offset = active.last_committed_offset if caught_up else -1
        failed = () if offline is None else (dirs(broker)[offline],)
        request = BrokerHeartbeatRequest(broker, registered.epoch, offset, fence, shut_down, failed)
        self.submit(active.process_broker_heartbeat(request))

    @precondition(lambda self: self.active is not None)
    @rule(directory=DIRECTORY, data=st.data())
    def assign_directory(self, directory: int, data: st.DataObject) -> None:
        """A broker says which of its directories holds its replicas of a topic."""
        active = self.active
        assert active is not None
        topics = sorted(active.state.replication.topics.values(), key=lambda t: t.name)
        if not topics:
            return
        topic = data.draw(st.sampled_from(topics))
        brokers = sorted({r for part in topic.parts.values() for r in part.replicas})
        broker = data.draw(st.sampled_from(brokers))
        registered = active.state.cluster.registration(broker)
        if registered is None:
            return
        mine = tuple(p for p, part in sorted(topic.parts.items()) if broker in part.replicas)
        assignment = DirectoryAssignment(dirs(broker)[directory], ((topic.id, mine),))
        self.submit(active.assign_replicas_to_dirs(broker, registered.epoch, [assignment]))

    @precondition(lambda self: self.active is not None)
    @rule(data=st.data())
    def directory_fails(self, data: st.DataObject) -> None:
        """A running broker's heartbeat names failed one of its directories that holds
        replicas."""
        active = self.active
        assert active is not None
        placed = sorted(
            (broker, dirs(broker).index(directory))
            for topic in active.state.replication.topics.values()
            for part in topic.parts.values()
            for broker, directory in zip(part.replicas, part.directories, strict=True)
            if directory in dirs(broker)
        )
        if not placed:
            return
        broker, directory = data.draw(st.sampled_from(placed))
        self.heartbeat(broker, caught_up=True, fence=False, shut_down=False, offline=directory)

    @precondition(lambda self: self.active is not None)
    @rule()
    def expire_sessions(self) -> None:
        assert self.active is not None
        self.time.sleep(SESSION_MS)
        for _ in range(3):
            self.submit(self.active.maybe_fence_stale_broker())

    @precondition(lambda self: self.active is not None)
    @rule(broker=BROKERS)
    def unregister(self, broker: int) -> None:
        assert self.active is not None
        self.submit(self.active.unregister_broker(broker))

    @precondition(lambda self: self.active is not None)
    @rule(name=TOPICS, partitions=st.integers(1, 3), factor=st.integers(1, 3))
    def create_topic(self, name: str, partitions: int, factor: int) -> None:
        assert self.active is not None

        async def create(active: QuorumController) -> None:
            results: list[CreatableTopicResult] = await active.create_topics(
                [CreatableTopic(name, partitions, factor)]
            )
            if results[0].error is None:
                self.topics.add(name)

        self.submit(create(self.active))

    @precondition(lambda self: self.active is not None)
    @rule(name=TOPICS)
    def delete_topic(self, name: str) -> None:
        assert self.active is not None
        topic_id = self.active.state.replication.topics_by_name.get(name)
        if topic_id is None:
            return

        async def delete(active: QuorumController) -> None:
            results = await active.delete_topics([topic_id])
            if results[topic_id] is None:
                self.topics.discard(name)

        self.submit(delete(self.active))

    @precondition(lambda self: self.active is not None)
    @rule(name=TOPICS, count=st.integers(1, 4))
    def create_partitions(self, name: str, count: int) -> None:
        assert self.active is not None
        self.submit(self.active.create_partitions([CreatePartitionsTopic(name, count)]))

    @precondition(lambda self: self.active is not None)
    @rule(name=TOPICS, enable=st.booleans())
    def set_unclean_leader_election(self, name: str, enable: bool) -> None:
        assert self.active is not None
        resource = ConfigResource(ConfigResourceType.TOPIC, name)
        change = {"unclean.leader.election.enable": (OpType.SET, str(enable).lower())}
        self.submit(self.active.incremental_alter_configs({resource: change}))

    @precondition(lambda self: self.active is not None)
    @rule(name=TOPICS, partition=st.integers(0, 2), data=st.data())
    def alter_partition(self, name: str, partition: int, data: st.DataObject) -> None:
        active = self.active
        assert active is not None
        topic_id = active.state.replication.topics_by_name.get(name)
        if topic_id is None:
            return
        current = active.state.replication.partition(topic_id, partition)
        if current is None or current.leader == -1:
            return
        followers = [r for r in current.replicas if r != current.leader]
        chosen = data.draw(st.lists(st.sampled_from(followers), unique=True)) if followers else []
        isr = (current.leader, *chosen)
        leader = active.state.cluster.registration(current.leader)
        assert leader is not None
        request = AlterPartitionData(
            partition, current.leader_epoch, tuple((b, -1) for b in isr), current.partition_epoch
        )
        self.submit(
            active.alter_partition(current.leader, leader.epoch, [(topic_id, name, [request])], 3)
        )

    @precondition(lambda self: self.active is not None)
    @rule(election=st.sampled_from(ElectionType))
    def elect_leaders(self, election: ElectionType) -> None:
        assert self.active is not None
        self.submit(self.active.elect_leaders(election, None))

    @precondition(lambda self: self.active is not None)
    @rule(name=TOPICS, replicas=st.none() | st.lists(BROKERS, min_size=1, max_size=3, unique=True))
    def reassign(self, name: str, replicas: list[int] | None) -> None:
        assert self.active is not None
        changes = {name: {0: None if replicas is None else tuple(replicas)}}
        self.submit(self.active.alter_partition_reassignments(changes))

    @precondition(lambda self: self.active is not None)
    @rule(broker=BROKERS)
    def start_broker(self, broker: int) -> None:
        """Registration, then a heartbeat once caught up: a broker's usual start."""
        self.quorum.commit()
        self.register(broker, new_incarnation=False)
        self.quorum.commit()
        self.settle()
        self.heartbeat(broker, caught_up=True, fence=False, shut_down=False, offline=None)

    @rule()
    def pause_commits(self) -> None:
        self.quorum.auto_commit = False

    @rule()
    def commit(self) -> None:
        self.quorum.auto_commit = True
        self.quorum.commit()
        self.settle()

    @rule(node=st.sampled_from((*NODES, None)))
    def change_leader(self, node: int | None) -> None:
        self.quorum.elect(node)
        self.settle()

    @rule(node=st.sampled_from(NODES))
    def standby_loads_a_snapshot(self, node: int) -> None:
        """A standby starts over from a snapshot of the committed log (as when it has
        fallen behind the leader's log start)."""
        controller = self.controllers[node]
        if controller.is_active or self.quorum.high_watermark == 0:
            return
        records = replay(self.quorum.committed_records()).records()
        epoch = self.quorum.leader_and_epoch.epoch
        snapshot = FakeSnapshot(OffsetAndEpoch(self.quorum.high_watermark, epoch), 0, records)
        self.quorum.load_snapshot(node, snapshot)
        self.settle()

    @rule(node=st.sampled_from(NODES))
    def take_snapshot(self, node: int) -> None:
        controller = self.controllers[node]
        self.snapshot = (controller.last_committed_offset, controller.committed_state.records())

    # -- invariants -----------------------------------------------------------------

    @invariant()
    def leaders_are_live_isr_members(self) -> None:
        for controller in self.controllers.values():
            for state in (controller.state, controller.committed_state):
                for topic in state.replication.topics.values():
                    for part in topic.parts.values():
                        assert set(part.isr) <= set(part.replicas)
                        if part.leader != -1:
                            assert part.leader in part.isr, part
                            assert state.cluster.is_unfenced(part.leader), part
                            directory = part.directory(part.leader)
                            assert state.cluster.has_online_dir(part.leader, directory), part
                        assert part.isr or part.leader == -1

    @invariant()
    def epochs_never_go_backwards(self) -> None:
        for controller in self.controllers.values():
            for topic in controller.committed_state.replication.topics.values():
                for partition_id, part in topic.parts.items():
                    key = (topic.id, partition_id)
                    now = (part.leader_epoch, part.partition_epoch)
                    before = self.epochs.get(key, now)
                    assert now[0] >= before[0] and now[1] >= before[1], (before, now)
                    self.epochs[key] = max(before, now)

    @invariant()
    def topics_are_the_models(self) -> None:
        committed = self.quorum.high_watermark - 1
        for controller in self.controllers.values():
            if controller.last_committed_offset == committed:
                assert set(controller.committed_state.replication.topics_by_name) == self.topics

    @invariant()
    def replay_reproduces_the_committed_state(self) -> None:
        log = self.quorum.committed_records()
        expected = replay(log).records()
        for controller in self.controllers.values():
            if controller.last_committed_offset == self.quorum.high_watermark - 1:
                assert controller.committed_state.records() == expected
        if self.snapshot is not None:
            offset, records = self.snapshot
            restored = replay([(offset, r) for r in records])
            for tail_offset, record in log:
                if tail_offset > offset:
                    restored.replay(record.message, tail_offset)
            assert restored.records() == expected

    @invariant()
    def a_standby_has_its_committed_state(self) -> None:
        for controller in self.controllers.values():
            if not controller.is_active:
                assert controller.state is controller.committed_state

    def teardown(self) -> None:
        for task in self.pending:
            task.cancel()
        for controller in self.controllers.values():
            self.run(controller.close())
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()


QuorumControllerMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQuorumControllerModel = QuorumControllerMachine.TestCase
