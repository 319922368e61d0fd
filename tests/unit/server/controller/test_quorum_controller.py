"""QuorumController on an in-memory Raft quorum: bootstrap on an empty log, writes that
complete when committed, standbys that replay and answer NOT_CONTROLLER, leadership
moving (a resigned controller back at its committed state, the new one writing nothing
before it caught up), session expiry, NoOpRecords and snapshots."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest
from control_manager_support import BOOTSTRAP, MockTime, controller_config, registration
from fake_raft import FakeRaftQuorum, new_controller, settle

from tiercel.protocol.errors import (
    NotControllerError,
    RecordBatchTooLargeError,
    TopicExistsError,
)
from tiercel.protocol.metadata.broker_records import RegisterBrokerRecord
from tiercel.protocol.metadata.log_control_records import NoOpRecord
from tiercel.protocol.metadata.metadata_version import FEATURE_NAME
from tiercel.server.controller.control_managers import ControlManagers
from tiercel.server.controller.controller_requests import (
    AlterPartitionData,
    BrokerHeartbeatRequest,
    CreatableTopic,
)
from tiercel.server.controller.feature_control_manager import UpgradeType
from tiercel.server.controller.quorum_controller import QuorumController


@pytest.fixture
async def controllers() -> AsyncIterator[tuple[FakeRaftQuorum, list[QuorumController]]]:
    quorum = FakeRaftQuorum()
    started = [new_controller(quorum, n) for n in (0, 1)]
    yield quorum, started
    for controller in started:
        await controller.close()


async def unfenced_broker(controller: QuorumController, broker_id: int) -> int:
    epoch = await controller.register_broker(registration(broker_id))
    offset = controller.last_committed_offset
    reply = await controller.process_broker_heartbeat(
        BrokerHeartbeatRequest(broker_id, epoch, offset)
    )
    assert not reply.is_fenced
    return epoch


async def test_first_active_controller_writes_the_bootstrap_records(
    controllers: tuple[FakeRaftQuorum, list[QuorumController]],
) -> None:
    quorum, (active, standby) = controllers
    quorum.elect(0)
    await settle(active)
    assert active.is_active and not standby.is_active
    assert [r for _, r in quorum.committed_records()] == list(BOOTSTRAP)
    assert (await active.finalized_features()).levels == {FEATURE_NAME: 25}
    await settle(standby)
    assert standby.committed_state.feature.has_metadata_version
    # A later leader finds the log bootstrapped and writes nothing on claiming.
    quorum.elect(1)
    await settle(standby)
    assert standby.is_active and len(quorum.committed_records()) == 1


async def test_writes_complete_when_committed_and_standbys_replay_them(
    controllers: tuple[FakeRaftQuorum, list[QuorumController]],
) -> None:
    quorum, (active, standby) = controllers
    quorum.elect(0)
    await unfenced_broker(active, 1)
    quorum.auto_commit = False
    pending = asyncio.ensure_future(active.create_topics([CreatableTopic("t")]))
    await settle(active)
    assert not pending.done()
    assert "t" in active.state.replication.topics_by_name  # replayed on append
    assert "t" not in active.committed_state.replication.topics_by_name
    quorum.commit()
    [result] = await asyncio.wait_for(pending, 10)
    assert result.error is None
    await settle(standby)
    assert standby.state.replication.topics == active.state.replication.topics
    with pytest.raises(NotControllerError, match="node 0"):
        await standby.create_topics([CreatableTopic("u")])


async def test_command_refusals_write_nothing(
    controllers: tuple[FakeRaftQuorum, list[QuorumController]],
) -> None:
    quorum, (active, _) = controllers
    quorum.elect(0)
    await unfenced_broker(active, 1)
    await active.create_topics([CreatableTopic("t")])
    end = quorum.end_offset
    [again] = await active.create_topics([CreatableTopic("t")])
    assert isinstance(again.error, TopicExistsError)
    assert quorum.end_offset == end


async def test_a_resigned_controller_reverts_to_its_committed_state(
    controllers: tuple[FakeRaftQuorum, list[QuorumController]],
) -> None:
    quorum, (old, new) = controllers
    quorum.elect(0)
    await unfenced_broker(old, 1)
    quorum.auto_commit = False
    lost = asyncio.ensure_future(old.create_topics([CreatableTopic("lost")]))
    await settle(old)
    assert "lost" in old.state.replication.topics_by_name
    quorum.elect(1)
    with pytest.raises(NotControllerError):
        await asyncio.wait_for(lost, 10)
    await settle(old)
    assert not old.is_active and (0, 1) in quorum.resigned
    assert old.state is old.committed_state
    assert "lost" not in old.state.replication.topics_by_name
    await settle(new)
    assert new.is_active
    quorum.auto_commit = True
    [created] = await new.create_topics([CreatableTopic("kept")])
    assert created.error is None
    await settle(old)
    assert set(old.state.replication.topics_by_name) == {"kept"}


async def test_an_append_refused_by_raft_renounces(
    controllers: tuple[FakeRaftQuorum, list[QuorumController]],
) -> None:
    quorum, (active, _) = controllers
    quorum.elect(0)
    await settle(active)
    quorum.leader_and_epoch = type(quorum.leader_and_epoch)(1, 99)  # Raft moved on, unheard
    with pytest.raises(NotControllerError):
        await active.register_broker(registration(1))
    assert not active.is_active


async def test_a_batch_too_large_fails_the_request_only(
    controllers: tuple[FakeRaftQuorum, list[QuorumController]],
) -> None:
    quorum, (active, _) = controllers
    quorum.elect(0)
    await unfenced_broker(active, 1)
    quorum.max_batch_records = 3
    with pytest.raises(RecordBatchTooLargeError):
        await active.create_topics([CreatableTopic("t", 5)])
    assert active.is_active and "t" not in active.state.replication.topics_by_name
    [created] = await active.create_topics([CreatableTopic("u", 1)])
    assert created.error is None


async def test_expired_sessions_are_fenced_by_the_periodic_task() -> None:
    quorum = FakeRaftQuorum()
    controller = new_controller(quorum, 0, session_timeout_ms=300)
    try:
        quorum.elect(0)
        await unfenced_broker(controller, 1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while controller.committed_state.cluster.is_unfenced(1):
            assert loop.time() < deadline, "the broker was never fenced"
            await asyncio.sleep(0.02)
    finally:
        await controller.close()


async def test_no_op_records_are_written_while_idle() -> None:
    quorum = FakeRaftQuorum()
    controller = new_controller(quorum, 0, max_idle_interval_ms=10)
    try:
        quorum.elect(0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not any(isinstance(r.message, NoOpRecord) for _, r in quorum.committed_records()):
            assert loop.time() < deadline, "no NoOpRecord was written"
            await asyncio.sleep(0.02)
    finally:
        await controller.close()


async def test_snapshots_reproduce_the_state() -> None:
    quorum = FakeRaftQuorum()
    controller = new_controller(quorum, 0, snapshot_max_new_record_bytes=200)
    try:
        quorum.elect(0)
        await unfenced_broker(controller, 1)
        await controller.create_topics([CreatableTopic("t", 3)])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not (quorum.snapshots and quorum.snapshots[-1].is_frozen):
            assert loop.time() < deadline, "no snapshot was written"
            await asyncio.sleep(0.02)
        snapshot = quorum.snapshots[-1]
        assert snapshot.snapshot_id.offset <= quorum.high_watermark
        # The snapshot is the state the committed records before its offset replay to.
        replayed = ControlManagers(controller_config(), MockTime(), random.Random(0))
        for offset, record in quorum.committed_records():
            if offset < snapshot.snapshot_id.offset:
                replayed.replay(record.message, offset)
        assert snapshot.records == replayed.records()
        assert isinstance(snapshot.records[1].message, RegisterBrokerRecord)
        other = FakeRaftQuorum()
        standby = new_controller(other, 1)
        try:
            other.load_snapshot(1, snapshot)
            await settle(standby)
            assert standby.last_committed_offset == snapshot.snapshot_id.offset - 1
            assert standby.state.records() == snapshot.records
        finally:
            await standby.close()
    finally:
        await controller.close()


async def test_preferred_leaders_are_restored_by_the_periodic_task() -> None:
    quorum = FakeRaftQuorum()
    controller = new_controller(quorum, 0, leader_imbalance_check_interval_ms=20)
    try:
        quorum.elect(0)
        epochs = {b: await unfenced_broker(controller, b) for b in (1, 2)}
        [created] = await controller.create_topics([CreatableTopic("t", assignments={0: (1, 2)})])
        assert created.topic_id is not None
        await controller.process_broker_heartbeat(
            BrokerHeartbeatRequest(1, epochs[1], controller.last_committed_offset, want_fence=True)
        )
        await controller.process_broker_heartbeat(
            BrokerHeartbeatRequest(1, epochs[1], controller.last_committed_offset)
        )
        partition = controller.state.replication.partition(created.topic_id, 0)
        assert partition is not None and partition.leader == 2
        isr = AlterPartitionData(
            0, partition.leader_epoch, ((2, -1), (1, -1)), partition.partition_epoch
        )
        await controller.alter_partition(2, epochs[2], [(created.topic_id, "t", [isr])], 3)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while (p := controller.committed_state.replication.partition(created.topic_id, 0)) and (
            p.leader != 1
        ):
            assert loop.time() < deadline, "the preferred leader was not restored"
            await asyncio.sleep(0.02)
    finally:
        await controller.close()


async def test_a_closed_controller_refuses_commands_and_ignores_raft() -> None:
    quorum = FakeRaftQuorum()
    controller = new_controller(quorum, 0)
    quorum.elect(0)
    await settle(controller)
    await controller.close()
    with pytest.raises(NotControllerError, match="shutting down"):
        await controller.create_topics([CreatableTopic("t")])
    with pytest.raises(NotControllerError, match="shutting down"):
        await controller.finalized_features()
    successor = new_controller(quorum, 1)
    try:
        quorum.elect(1)  # the closed controller is told, and given the commits, in vain
        await successor.update_features({FEATURE_NAME: 25}, {FEATURE_NAME: UpgradeType.UPGRADE})
        assert quorum.high_watermark == quorum.end_offset == 2
    finally:
        await successor.close()


async def test_a_snapshot_is_taken_once_the_interval_has_passed() -> None:
    quorum = FakeRaftQuorum()
    time = MockTime()
    controller = new_controller(quorum, 0, time=time, snapshot_max_interval_ms=60_000)
    try:
        quorum.elect(0)
        await unfenced_broker(controller, 1)
        assert quorum.snapshots == []
        time.sleep(60_000)
        await controller.create_topics([CreatableTopic("t")])
        await settle(controller)
        [snapshot] = quorum.snapshots
        assert snapshot.snapshot_id.offset == quorum.high_watermark
        time.sleep(30_000)  # new records, but within the interval of the last snapshot
        await controller.create_topics([CreatableTopic("u")])
        await settle(controller)
        assert len(quorum.snapshots) == 1
    finally:
        await controller.close()
