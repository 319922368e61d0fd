"""A KRaft broker's replica placements (KIP-858): the AssignmentsManager against a
scripted controller on a local socket, through a real NodeToControllerChannel —
batching by directory and topic, the latest assignment of a partition winning, stale
ones dropped, failed requests and refused partitions sent again, close — and the hook
that feeds it, ReplicaManager with two log dirs applying metadata deltas through the
broker's publishers (Kafka's ReplicaManager.applyDelta and maybeUpdateTopicAssignment).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.scripted_broker import ScriptedLeader
from tiercel.config.broker_config import BrokerConfig
from tiercel.config.log_config import LogConfig
from tiercel.protocol.metadata.broker_records import BrokerEndpoint, RegisterBrokerRecord
from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_version import FEATURE_NAME, MetadataVersion
from tiercel.protocol.metadata.topic_records import (
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tiercel.server.assignments_manager import (
    MAX_ASSIGNMENTS_PER_REQUEST,
    AssignmentsManager,
    ExponentialBackoff,
)
from tiercel.server.kraft_broker_metadata import DirectoryAssignmentPublisher
from tiercel.server.metadata.broker_metadata_publisher import BrokerMetadataPublisher
from tiercel.server.metadata.image.metadata_delta import MetadataDelta
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.server.metadata.image.metadata_provenance import MetadataProvenance
from tiercel.server.metadata.image.partition_registration import UNASSIGNED_DIRECTORY
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.node_to_controller_channel import (
    ControllerInformation,
    NodeToControllerChannel,
)
from tiercel.server.partition import PartitionState
from tiercel.server.replica_manager import ReplicaManager
from tiercel.storage.log_manager import LogManager
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition

ASSIGN_REPLICAS_TO_DIRS = 73
NODE = 1
BROKER_EPOCH = 77
T_ID = uuid.UUID("6d1d2b3a-0c6e-4d6a-9f5b-6a0d5e1f2a3b")
U_ID = uuid.UUID("0b9c3e1e-7f0a-4c56-8a3d-2f1e4d5c6b7a")
DIR_A = uuid.UUID("a0000000-0000-4000-8000-00000000000a")
DIR_B = uuid.UUID("b0000000-0000-4000-8000-00000000000b")
FAST = ExponentialBackoff(0.01, 2.0, 0.08, 0.0)
WAIT_S = 10.0


def tip(topic_id: uuid.UUID, name: str, partition: int) -> TopicIdPartition:
    return TopicIdPartition(topic_id, TopicPartition(name, partition))


T0, T1, U0 = tip(T_ID, "t", 0), tip(T_ID, "t", 1), tip(U_ID, "u", 0)


def records(
    version: MetadataVersion = MetadataVersion.IBP_4_0_IV3,
    directories: Iterable[uuid.UUID] = (UNASSIGNED_DIRECTORY, UNASSIGNED_DIRECTORY),
) -> list[MetadataRecord]:
    """This broker registered; topic t with a partition per directory given, u with
    one, every replica on this broker alone."""
    return [
        FeatureLevelRecord(name=FEATURE_NAME, feature_level=version.feature_level),
        RegisterBrokerRecord(
            broker_id=NODE,
            incarnation_id=uuid.UUID(int=5),
            broker_epoch=BROKER_EPOCH,
            end_points=(
                BrokerEndpoint(name="PLAINTEXT", host="h", port=9092, security_protocol=0),
            ),
            rack=None,
            fenced=False,
        ),
        TopicRecord(name="t", topic_id=T_ID),
        *(
            PartitionRecord(
                partition_id=p,
                topic_id=T_ID,
                replicas=(NODE,),
                isr=(NODE,),
                leader=NODE,
                directories=(d,) if version.is_directory_assignment_supported() else (),
            )
            for p, d in enumerate(directories)
        ),
        TopicRecord(name="u", topic_id=U_ID),
        PartitionRecord(partition_id=0, topic_id=U_ID, replicas=(NODE,), isr=(NODE,), leader=NODE),
    ]


def replay(
    records: Iterable[MetadataRecord], image: MetadataImage = MetadataImage.EMPTY
) -> tuple[MetadataDelta, MetadataImage]:
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta, delta.apply(MetadataProvenance(0, 1, 0, True))


def answer_all(error_codes: dict[TopicIdPartition, int] | None = None) -> Callable[[Any], Any]:
    """The controller's answer to each request: every partition it names, with its
    error from ``error_codes`` (NONE otherwise)."""
    names = {T_ID: "t", U_ID: "u"}

    def answer(request: Any) -> dict[str, Any]:
        return {
            "error_code": 0,
            "directories": [
                {
                    "id_": d.id_,
                    "topics": [
                        {
                            "topic_id": t.topic_id,
                            "partitions": [
                                {
                                    "partition_index": p.partition_index,
                                    "error_code": (error_codes or {}).get(
                                        tip(t.topic_id, names[t.topic_id], p.partition_index), 0
                                    ),
                                }
                                for p in t.partitions
                            ],
                        }
                        for t in d.topics
                    ],
                }
                for d in request.directories
            ],
        }

    return answer


def sent(controller: ScriptedLeader) -> list[Any]:
    return [r for k, _, r in controller.requests if k == ASSIGN_REPLICAS_TO_DIRS]


def placements(request: Any) -> dict[tuple[uuid.UUID, int], uuid.UUID]:
    """(topic id, partition) -> directory, as one request carries them."""
    return {
        (t.topic_id, p.partition_index): d.id_
        for d in request.directories
        for t in d.topics
        for p in t.partitions
    }


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.005)


@pytest.fixture
async def controller() -> AsyncIterator[ScriptedLeader]:
    scripted = ScriptedLeader({ASSIGN_REPLICAS_TO_DIRS: (0, 0)})
    scripted.server = await asyncio.start_server(scripted.serve, "127.0.0.1", 0)
    yield scripted
    scripted.server.close()
    await scripted.server.wait_closed()


class Broker:
    """The manager of broker NODE, reading the image the test sets."""

    def __init__(self, controller: ScriptedLeader, retry_timeout_s: float = 5.0) -> None:
        host, port = controller.endpoint
        self.known: ControllerInformation | None = ControllerInformation(3000, host, port)
        self.channel = NodeToControllerChannel(lambda: self.known, "broker-1", 5.0, 0.02)
        self.image = replay(records())[1]
        self.manager = AssignmentsManager(
            NODE, self.channel, lambda: self.image, retry_timeout_s, FAST
        )


async def test_assignments_go_together_by_directory_and_topic_with_the_broker_epoch(
    controller: ScriptedLeader,
) -> None:
    controller.answers[ASSIGN_REPLICAS_TO_DIRS] = answer_all()
    broker = Broker(controller)
    broker.manager.on_assignment(T0, DIR_A, "test")
    broker.manager.on_assignment(U0, DIR_A, "test")
    broker.manager.on_assignment(T1, DIR_B, "test")
    await until(lambda: len(sent(controller)) == 1 and broker.manager.num_pending == 0)
    (request,) = sent(controller)
    assert (request.broker_id, request.broker_epoch) == (NODE, BROKER_EPOCH)
    grouped = {
        d.id_: {t.topic_id: [p.partition_index for p in t.partitions] for t in d.topics}
        for d in request.directories
    }
    assert grouped == {DIR_A: {T_ID: [0], U_ID: [0]}, DIR_B: {T_ID: [1]}}
    await broker.manager.close()


async def test_the_latest_assignment_of_a_partition_wins_and_stale_ones_are_dropped(
    controller: ScriptedLeader,
) -> None:
    controller.answers[ASSIGN_REPLICAS_TO_DIRS] = answer_all()
    broker = Broker(controller)
    broker.manager.on_assignment(T0, DIR_A, "test")
    broker.manager.on_assignment(T0, DIR_B, "test")  # moved again before the send
    broker.manager.on_assignment(tip(T_ID, "t", 7), DIR_A, "no such partition")
    broker.manager.on_assignment(tip(uuid.UUID(int=9), "gone", 0), DIR_A, "no such topic")
    # u moved away from this broker (Kafka's Assignment.valid: no longer a replica).
    moved = PartitionChangeRecord(partition_id=0, topic_id=U_ID, replicas=(2,), isr=(2,), leader=2)
    broker.image = replay([moved], broker.image)[1]
    broker.manager.on_assignment(U0, DIR_A, "not a replica any more")
    await until(lambda: broker.manager.num_pending == 0)
    assert [placements(r) for r in sent(controller)] == [{(T_ID, 0): DIR_B}]
    await broker.manager.close()


async def test_a_request_refused_as_a_whole_goes_again_with_the_newest_assignments(
    controller: ScriptedLeader,
) -> None:
    refusals = 2
    seen: list[dict[tuple[uuid.UUID, int], uuid.UUID]] = []

    def refuse_then_accept(request: Any) -> dict[str, Any]:
        nonlocal refusals
        seen.append(placements(request))
        if refusals:
            refusals -= 1
            if refusals == 1:  # a newer placement arrives while this one is refused
                broker.manager.on_assignment(T0, DIR_B, "moved")
            return {"error_code": 77, "directories": []}  # STALE_BROKER_EPOCH
        return answer_all()(request)  # type: ignore[no-any-return]

    controller.answers[ASSIGN_REPLICAS_TO_DIRS] = refuse_then_accept
    broker = Broker(controller)
    broker.manager.on_assignment(T0, DIR_A, "test")
    broker.manager.on_assignment(T1, DIR_A, "test")
    await until(lambda: broker.manager.num_pending == 0)
    assert seen == [
        {(T_ID, 0): DIR_A, (T_ID, 1): DIR_A},
        {(T_ID, 0): DIR_B, (T_ID, 1): DIR_A},
        {(T_ID, 0): DIR_B, (T_ID, 1): DIR_A},
    ]
    await broker.manager.close()


async def test_without_a_controller_the_assignments_wait_and_go_once_one_answers(
    controller: ScriptedLeader, caplog: pytest.LogCaptureFixture
) -> None:
    controller.answers[ASSIGN_REPLICAS_TO_DIRS] = answer_all()
    broker = Broker(controller, retry_timeout_s=0.05)
    endpoint = broker.known
    broker.known = None  # no Raft leader known: each request times out
    broker.manager.on_assignment(T0, DIR_A, "test")
    await until(lambda: caplog.text.count("event=directory_assignments_failed") >= 2)
    assert sent(controller) == [] and broker.manager.num_pending == 1
    broker.known = endpoint
    await until(lambda: broker.manager.num_pending == 0)
    assert [placements(r) for r in sent(controller)] == [{(T_ID, 0): DIR_A}]
    await broker.manager.close()


async def test_refused_and_unanswered_partitions_go_again_and_accepted_ones_do_not(
    controller: ScriptedLeader,
) -> None:
    answers: list[Callable[[Any], Any]] = [
        answer_all({T0: 3}),  # UNKNOWN_TOPIC_OR_PARTITION for t-0
        lambda request: {"error_code": 0, "directories": []},  # names none of them
        answer_all(),
    ]
    controller.answers[ASSIGN_REPLICAS_TO_DIRS] = lambda request: answers.pop(0)(request)
    broker = Broker(controller)
    broker.manager.on_assignment(T0, DIR_A, "test")
    broker.manager.on_assignment(T1, DIR_B, "test")
    await until(lambda: broker.manager.num_pending == 0)
    assert [placements(r) for r in sent(controller)] == [
        {(T_ID, 0): DIR_A, (T_ID, 1): DIR_B},
        {(T_ID, 0): DIR_A},
        {(T_ID, 0): DIR_A},
    ]
    await broker.manager.close()


async def test_more_than_a_request_holds_goes_in_several(controller: ScriptedLeader) -> None:
    controller.answers[ASSIGN_REPLICAS_TO_DIRS] = answer_all()
    broker = Broker(controller)
    partitions = MAX_ASSIGNMENTS_PER_REQUEST + 5
    broker.image = replay(
        [
            PartitionRecord(partition_id=p, topic_id=T_ID, replicas=(NODE,), isr=(NODE,), leader=1)
            for p in range(partitions)
        ],
        broker.image,
    )[1]
    for p in range(partitions):
        broker.manager.on_assignment(tip(T_ID, "t", p), DIR_A, "test")
    await until(lambda: broker.manager.num_pending == 0)
    assert [len(placements(r)) for r in sent(controller)] == [MAX_ASSIGNMENTS_PER_REQUEST, 5]
    await broker.manager.close()


async def test_close_stops_sending(controller: ScriptedLeader) -> None:
    controller.answers[ASSIGN_REPLICAS_TO_DIRS] = answer_all()
    closed = Broker(controller)
    closed.manager.on_assignment(T0, DIR_A, "test")
    await closed.manager.close()
    closed.manager.on_assignment(T1, DIR_A, "after close")
    # Another broker's assignment, queued later, is due later: once it arrived, the
    # closed manager's would have.
    other = Broker(controller)
    other.manager.on_assignment(U0, DIR_B, "test")
    await until(lambda: other.manager.num_pending == 0)
    assert [placements(r) for r in sent(controller)] == [{(U_ID, 0): DIR_B}]
    assert closed.manager.num_pending == 1  # dropped with the manager, never sent
    await other.manager.close()


# -- the hook: ReplicaManager on two log dirs -----------------------------------------


class NoIsrChanges:
    """A single-replica leader never changes its ISR."""

    async def submit(self, tp: TopicPartition, proposed: PartitionState) -> PartitionState | None:
        raise AssertionError(f"unexpected ISR change of {tp}")


@dataclass
class TwoDirs:
    """Broker NODE's ReplicaManager on dirs a (DIR_A) and b (DIR_B); ``handed`` gets each
    assignment it hands on."""

    rm: ReplicaManager
    log_manager: LogManager
    dir_a: str
    handed: list[tuple[Any, ...]]


@pytest.fixture
async def two_dirs(tmp_path: Path) -> AsyncIterator[TwoDirs]:
    scheduler = Scheduler(asyncio.get_running_loop(), 2)
    dirs = [tmp_path / "a", tmp_path / "b"]
    config = BrokerConfig({"node.id": NODE, "log.dirs": [str(d) for d in dirs]})
    log_config = LogConfig.from_overrides(config, {})
    log_manager = LogManager(config, scheduler, lambda topic: log_config)
    await log_manager.startup(None)
    cache = MetadataCache(NODE, "c")
    rm = ReplicaManager(
        config, NODE, log_manager, scheduler, lambda topic: log_config, cache, NoIsrChanges()
    )
    rm.directory_ids = {os.path.abspath(dirs[0]): DIR_A, os.path.abspath(dirs[1]): DIR_B}
    handed: list[tuple[Any, ...]] = []
    rm.directory_event_handler = lambda *assignment: handed.append(assignment)
    yield TwoDirs(rm, log_manager, os.path.abspath(dirs[0]), handed)
    rm.shutdown()
    await rm.fetcher_manager.shutdown()
    await log_manager.shutdown()
    await scheduler.drain()
    scheduler.shutdown()


async def publish(
    rm: ReplicaManager, records: Iterable[MetadataRecord], image: MetadataImage
) -> MetadataImage:
    """``records`` through the broker's publishers, in the broker's order."""
    delta, new_image = replay(records, image)
    publishers = (
        BrokerMetadataPublisher(MetadataCache(NODE, "c"), rm.on_topic),
        DirectoryAssignmentPublisher(NODE, rm),
    )
    for publisher in publishers:
        await publisher.on_metadata_update(delta, new_image)
    return new_image


async def test_a_replica_found_in_another_dir_than_the_metadata_says_is_assigned_there(
    two_dirs: TwoDirs,
) -> None:
    rm, handed = two_dirs.rm, two_dirs.handed
    # t-0 is created in a, then t-1 and u-0 in the emptiest dirs, b and a. The controller
    # left t-0 UNASSIGNED (a broker with several dirs chooses) and put t-1 in b already.
    image = await publish(
        rm, records(directories=(UNASSIGNED_DIRECTORY, DIR_B)), MetadataImage.EMPTY
    )
    parents = {
        tp.partition: rm.partitions[tp].log.parent_dir for tp in rm.partitions if tp.topic == "t"
    }
    assert {p: os.path.basename(d) for p, d in parents.items()} == {0: "a", 1: "b"}
    assert (T0, DIR_A, "Applying metadata delta") in handed
    assert not any(assignment[0] == T1 for assignment in handed)
    handed.clear()
    # The controller takes t-0's placement: nothing to say. Then it has t-1 in a,
    # where it is not: assigned again to b.
    placed = PartitionChangeRecord(partition_id=0, topic_id=T_ID, directories=(DIR_A,))
    image = await publish(rm, [placed], image)
    assert handed == []
    misplaced = PartitionChangeRecord(partition_id=1, topic_id=T_ID, directories=(DIR_A,))
    image = await publish(rm, [misplaced], image)
    assert handed == [(T1, DIR_B, "Applying metadata delta")]
    handed.clear()
    # Deltas that leave this broker's directories alone place nothing.
    image = await publish(rm, [RemoveTopicRecord(topic_id=U_ID)], image)
    leader_only = PartitionChangeRecord(partition_id=0, topic_id=T_ID, leader=NODE)
    image = await publish(rm, [leader_only], image)
    assert handed == []
    # Dir a failed: t-0 has no log left to place.
    rm.mark_partitions_offline(two_dirs.log_manager.handle_log_dir_failure(two_dirs.dir_a))
    moved = PartitionChangeRecord(partition_id=0, topic_id=T_ID, directories=(DIR_B,))
    await publish(rm, [moved], image)
    assert handed == []


async def test_before_directory_assignment_nothing_is_assigned(two_dirs: TwoDirs) -> None:
    """metadata.version before 3.7-IV2: the controller takes no AssignReplicasToDirs
    (Kafka's applyDelta checks isDirectoryAssignmentSupported)."""
    await publish(two_dirs.rm, records(MetadataVersion.IBP_3_7_IV1), MetadataImage.EMPTY)
    assert len(two_dirs.rm.partitions) == 3
    assert two_dirs.handed == []
