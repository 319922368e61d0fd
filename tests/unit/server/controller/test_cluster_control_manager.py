"""ClusterControlManager and BrokerHeartbeatManager: registration (epochs, incarnations,
Kafka's refusals), heartbeats that unfence a caught-up broker, fencing on request and
on session expiry, controlled shutdown, unregistration, and replay of every broker
record."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from control_manager_support import CLUSTER_ID, ManagersContext, registration

from tiercel.protocol.errors import ErrorCode, UnsupportedVersionError
from tiercel.protocol.metadata.broker_records import (
    BrokerRegistrationChangeRecord,
    ControllerEndpoint,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from tiercel.server.controller.controller_exceptions import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    InconsistentClusterIdError,
    InvalidRegistrationError,
    StaleBrokerEpochError,
)
from tiercel.server.controller.controller_requests import BrokerHeartbeatRequest, CreatableTopic
from tiercel.server.metadata.image.broker_registration import VersionRange


def test_registration_writes_a_fenced_broker_whose_epoch_is_the_record_offset() -> None:
    ctx = ManagersContext()
    offset = ctx.offset
    result = ctx.state.cluster.register_broker(
        registration(1, rack="r1"), offset, ctx.state.feature.finalized_features(0)
    )
    [record] = result.records
    assert record.version == 3
    assert isinstance(record.message, RegisterBrokerRecord)
    assert record.message.broker_epoch == offset == result.response
    assert record.message.fenced
    assert record.message.rack == "r1"
    ctx.run(result)
    registered = ctx.state.cluster.registration(1)
    assert registered is not None and registered.fenced and registered.epoch == offset
    assert ctx.state.cluster.register_broker_record_offset(1) == offset


def test_heartbeat_unfences_only_once_caught_up_with_the_registration() -> None:
    ctx = ManagersContext()
    epoch = ctx.register(1)
    register_offset = ctx.state.cluster.register_broker_record_offset(1)
    behind = BrokerHeartbeatRequest(1, epoch, register_offset - 1)
    result = ctx.state.replication.process_broker_heartbeat(behind, register_offset)
    assert result.records == []
    assert result.response.is_fenced and not result.response.is_caught_up
    caught_up = BrokerHeartbeatRequest(1, epoch, register_offset)
    reply = ctx.run(ctx.state.replication.process_broker_heartbeat(caught_up, register_offset))
    assert not reply.is_fenced and reply.is_caught_up
    registered = ctx.state.cluster.registration(1)
    assert registered is not None and not registered.fenced


def test_heartbeat_unfencing_writes_a_registration_change_record() -> None:
    ctx = ManagersContext()
    epoch = ctx.register(1)
    offset = ctx.state.cluster.register_broker_record_offset(1)
    result = ctx.state.replication.process_broker_heartbeat(
        BrokerHeartbeatRequest(1, epoch, offset), offset
    )
    assert [r.message for r in result.records] == [
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, fenced=-1)
    ]
    assert result.records[0].version == 0


def test_a_stale_epoch_is_refused() -> None:
    ctx = ManagersContext()
    epoch = ctx.register(1)
    with pytest.raises(StaleBrokerEpochError, match=f"Expected broker epoch {epoch}"):
        ctx.state.cluster.check_broker_epoch(1, epoch + 1)
    with pytest.raises(StaleBrokerEpochError, match="No broker registration found for broker id 2"):
        ctx.state.cluster.check_broker_epoch(2, 0)


def test_same_incarnation_keeps_its_epoch_and_state_new_one_gets_a_new_epoch() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1)
    first = ctx.state.cluster.registration(1)
    assert first is not None
    again = ctx.register(1)
    assert again == first.epoch
    still = ctx.state.cluster.registration(1)
    assert still is not None and not still.fenced
    # A new incarnation must wait for the old session to end.
    other = registration(1, incarnation=uuid.UUID(int=99))
    finalized = ctx.state.feature.finalized_features(0)
    with pytest.raises(DuplicateBrokerRegistrationError) as e:
        ctx.state.cluster.register_broker(other, ctx.offset, finalized)
    assert e.value.error_code == ErrorCode.duplicate_broker_registration
    ctx.time.sleep(9000)
    new_epoch = ctx.run(ctx.state.cluster.register_broker(other, ctx.offset, finalized))
    assert new_epoch > first.epoch
    registered = ctx.state.cluster.registration(1)
    assert registered is not None and registered.fenced and registered.epoch == new_epoch


def test_a_fenced_broker_registers_a_new_incarnation_at_once() -> None:
    """Kafka's hasValidSession is false for a fenced broker: one that stopped after its
    controlled shutdown (and was fenced by it) restarts without waiting for a session
    timeout."""
    ctx = ManagersContext()
    epoch = ctx.register(1)  # registered, not caught up yet: fenced
    registered = ctx.state.cluster.registration(1)
    assert registered is not None and registered.fenced
    finalized = ctx.state.feature.finalized_features(0)
    restarted = registration(1, incarnation=uuid.UUID(int=98))
    new_epoch = ctx.run(ctx.state.cluster.register_broker(restarted, ctx.offset, finalized))
    assert new_epoch > epoch


def test_registration_refusals() -> None:
    ctx = ManagersContext()
    finalized = ctx.state.feature.finalized_features(0)
    cluster = ctx.state.cluster
    wrong_cluster = replace(registration(1), cluster_id="x")
    with pytest.raises(InconsistentClusterIdError, match=f"Expected cluster ID {CLUSTER_ID}"):
        cluster.register_broker(wrong_cluster, 0, finalized)
    no_dirs = replace(registration(1), log_dirs=())
    with pytest.raises(InvalidRegistrationError, match="No directories"):
        cluster.register_broker(no_dirs, 0, finalized)
    old = replace(registration(1), features={"metadata.version": VersionRange(7, 20)})
    with pytest.raises(UnsupportedVersionError, match="does not support finalized version 25"):
        cluster.register_broker(old, 0, finalized)
    ctx.register(1)
    taken = replace(registration(2), log_dirs=registration(1).log_dirs)
    with pytest.raises(InvalidRegistrationError, match="already registered with directory"):
        cluster.register_broker(taken, 0, finalized)


def test_session_expiry_fences_the_broker_and_moves_its_leaderships() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", partitions=1, factor=2)
    leader = ctx.partition(topic).leader
    other = 3 - leader
    ctx.time.sleep(8000)
    ctx.heartbeat(other)
    assert ctx.run(ctx.state.replication.maybe_fence_one_stale_broker()) is None
    ctx.time.sleep(1000)
    assert ctx.run(ctx.state.replication.maybe_fence_one_stale_broker()) == leader
    registered = ctx.state.cluster.registration(leader)
    assert registered is not None and registered.fenced
    partition = ctx.partition(topic)
    assert partition.leader == other and partition.isr == (other,)
    assert partition.leader_epoch == 1


def test_want_fence_and_a_fenced_broker_regaining_leadership() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1)
    topic = ctx.create_topic("t")
    reply = ctx.heartbeat(1, want_fence=True)
    assert reply.is_fenced
    partition = ctx.partition(topic)
    assert partition.leader == -1 and partition.isr == (1,)  # the last ISR member stays
    reply = ctx.heartbeat(1)
    assert not reply.is_fenced
    assert ctx.partition(topic).leader == 1
    assert ctx.partition(topic).leader_epoch == 2


def test_controlled_shutdown_moves_leaders_then_grants_shutdown() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", partitions=2, factor=2)
    leaders = {ctx.partition(topic, p).leader for p in (0, 1)}
    assert leaders == {1, 2}
    reply = ctx.heartbeat(1, want_shut_down=True)
    # Leaderships moved within the same batch: nothing is left to wait for.
    assert reply.in_controlled_shutdown and not reply.should_shut_down
    for p in (0, 1):
        assert ctx.partition(topic, p).leader == 2
        assert 1 not in ctx.partition(topic, p).isr
    registered = ctx.state.cluster.registration(1)
    assert registered is not None and registered.in_controlled_shutdown
    reply = ctx.heartbeat(1, want_shut_down=True)
    assert reply.should_shut_down and reply.is_fenced


def test_unfenced_broker_without_leaderships_shuts_down_at_once() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1)
    reply = ctx.heartbeat(1, want_shut_down=True)
    assert reply.should_shut_down and reply.is_fenced


def test_unregister_removes_the_broker_from_isrs() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", factor=2)
    ctx.run(ctx.state.replication.unregister_broker(1))
    assert ctx.state.cluster.registration(1) is None
    assert ctx.partition(topic).isr == (2,) and ctx.partition(topic).leader == 2
    with pytest.raises(BrokerIdNotRegisteredError, match="Broker ID 1 is not currently registered"):
        ctx.state.replication.unregister_broker(1)


def test_old_fence_and_unfence_records_replay() -> None:
    ctx = ManagersContext()
    epoch = ctx.register(1)
    cluster = ctx.state.cluster
    cluster.replay_unfence(UnfenceBrokerRecord(id=1, epoch=epoch))
    assert cluster.is_active(1)
    cluster.replay_fence(FenceBrokerRecord(id=1, epoch=epoch))
    assert not cluster.is_unfenced(1)
    with pytest.raises(RuntimeError):
        cluster.replay_fence(FenceBrokerRecord(id=1, epoch=epoch + 1))
    cluster.replay_unregister(UnregisterBrokerRecord(broker_id=1, broker_epoch=epoch))
    assert cluster.registration(1) is None


def test_registrations_are_written_back_as_they_are() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, racks=["r"])
    ctx.register(2)
    endpoint = ControllerEndpoint(name="CONTROLLER", host="c", port=9093)
    ctx.run(ctx.state.cluster.register_controller(3000, uuid.UUID(int=5), (endpoint,), {}))
    fresh = ManagersContext()
    fresh.replay(list(ctx.state.records()))
    assert fresh.state.cluster.broker_registrations == ctx.state.cluster.broker_registrations
    assert fresh.state.cluster.controller_registrations == (
        ctx.state.cluster.controller_registrations
    )
    assert fresh.state.cluster.controller_registrations[3000].end_points == (endpoint,)


def test_a_new_incarnation_leaves_every_isr_until_it_is_unfenced() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", partitions=2, factor=2)
    [created] = ctx.run(
        ctx.state.topics.create_topics([CreatableTopic("only", assignments={0: (1,)})], False)
    )
    only = created.topic_id
    assert only is not None
    ctx.time.sleep(9000)  # broker 1 died; its session expired before it was fenced
    ctx.heartbeat(2)
    finalized = ctx.state.feature.finalized_features(0)
    restarted = registration(1, incarnation=uuid.UUID(int=77))
    ctx.run(ctx.state.cluster.register_broker(restarted, ctx.offset, finalized))
    for p in (0, 1):
        assert ctx.partition(topic, p).leader == 2 and ctx.partition(topic, p).isr == (2,)
    assert ctx.partition(only).leader == -1 and ctx.partition(only).isr == (1,)
    ctx.heartbeat(1)
    assert ctx.partition(only).leader == 1


def test_controlled_shutdown_is_a_version_1_registration_change() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    ctx.run(ctx.state.topics.create_topics([CreatableTopic("t", assignments={0: (1, 2)})], False))
    epoch = ctx.state.cluster.broker_registrations[1].epoch
    request = BrokerHeartbeatRequest(1, epoch, ctx.offset, want_shut_down=True)
    offset = ctx.state.cluster.register_broker_record_offset(1)
    result = ctx.state.replication.process_broker_heartbeat(request, offset)
    first = result.records[0]
    assert first.version == 1
    assert first.message == BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=epoch, in_controlled_shutdown=1
    )
