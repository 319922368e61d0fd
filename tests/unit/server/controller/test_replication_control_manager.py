"""ReplicationControlManager and its topic commands: CreateTopics (defaults, rack-aware
placement, manual assignments, configs, validate-only, Kafka's refusals),
CreatePartitions, DeleteTopics, AlterPartition with its epoch checks, ElectLeaders and
partition reassignments, and the state written back as records."""

from __future__ import annotations

import uuid

import pytest
from control_manager_support import ManagersContext

from tiercel.protocol.errors import (
    ElectionNotNeededError,
    ErrorCode,
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    NoReassignmentInProgressError,
    NotControllerError,
    PolicyViolationError,
    PreferredLeaderNotAvailableError,
    TopicExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from tiercel.protocol.metadata.config_records import ConfigRecord
from tiercel.protocol.metadata.topic_records import PartitionRecord, TopicRecord
from tiercel.server.controller.configuration_control_manager import (
    ConfigResource,
    ConfigResourceType,
    OpType,
)
from tiercel.server.controller.controller_exceptions import (
    IneligibleReplicaError,
    InvalidUpdateVersionError,
    NewLeaderElectedError,
    StaleBrokerEpochError,
)
from tiercel.server.controller.controller_requests import (
    AlterPartitionData,
    CreatableTopic,
    CreatePartitionsTopic,
    ElectionType,
    OngoingReassignment,
)


def create(ctx: ManagersContext, *topics: CreatableTopic, validate_only: bool = False) -> list:
    return ctx.run(ctx.state.topics.create_topics(list(topics), validate_only))


def test_create_topic_uses_the_broker_defaults_and_writes_topic_configs_then_partitions() -> None:
    ctx = ManagersContext(default_num_partitions=3, default_replication_factor=2)
    ctx.add_brokers(1, 2, 3)
    result = ctx.state.topics.create_topics(
        [CreatableTopic("t", configs={"cleanup.policy": "compact"})], False
    )
    [created] = result.response
    assert created.error is None and created.num_partitions == 3
    assert created.replication_factor == 2
    kinds = [type(r.message) for r in result.records]
    assert kinds == [TopicRecord, ConfigRecord, PartitionRecord, PartitionRecord, PartitionRecord]
    assert result.records[2].version == 2
    ctx.run(result)
    assert created.topic_id is not None
    for p in range(3):
        part = ctx.partition(created.topic_id, p)
        assert len(part.replicas) == 2 and part.isr == part.replicas
        assert part.leader == part.replicas[0] and part.leader_epoch == 0
    leaders = {ctx.partition(created.topic_id, p).leader for p in range(3)}
    assert leaders == {1, 2, 3}  # striped


def test_placement_spreads_replicas_across_racks_and_avoids_fenced_leaders() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2, 3, 4, racks=["a", "a", "b", "b"])
    ctx.register(5, rack="c")  # fenced
    topic = ctx.create_topic("t", partitions=12, factor=3)
    for p in range(12):
        part = ctx.partition(topic, p)
        racks = {ctx.state.cluster.broker_registrations[b].rack for b in part.replicas}
        assert len(racks) == 3
        assert part.leader != 5 and 5 not in part.isr


def test_create_topic_refusals() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1)
    ctx.create_topic("a.b")
    results = create(
        ctx,
        CreatableTopic("a.b"),
        CreatableTopic("a_b"),
        CreatableTopic("dup"),
        CreatableTopic("dup"),
        CreatableTopic("rf", replication_factor=2),
        CreatableTopic("zero", num_partitions=0),
        CreatableTopic("bad", configs={"retention.ms": "soon"}),
        CreatableTopic("unknown", configs={"no.such": "1"}),
        CreatableTopic(""),
    )
    errors = {r.name: type(r.error) for r in results}
    assert errors == {
        "a.b": TopicExistsError,
        "a_b": InvalidTopicError,  # collides with a.b
        "dup": InvalidRequestError,
        "rf": InvalidReplicationFactorError,
        "zero": InvalidPartitionsError,
        "bad": InvalidConfigError,
        "unknown": InvalidConfigError,
        "": InvalidTopicError,
    }
    rf = next(r for r in results if r.name == "rf")
    assert rf.error is not None and rf.error.message == (
        "Unable to replicate the partition 2 time(s): The target replication factor of 2 "
        "cannot be reached because only 1 broker(s) are registered."
    )
    assert list(ctx.state.replication.topics_by_name) == ["a.b"]


def test_validate_only_creates_nothing() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1)
    [result] = create(ctx, CreatableTopic("t"), validate_only=True)
    assert result.error is None and result.num_partitions == 1
    assert ctx.state.replication.topics_by_name == {}


def test_manual_assignment() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    ctx.register(3)
    [ok] = create(ctx, CreatableTopic("t", assignments={0: (2, 1), 1: (3, 1)}))
    assert ok.error is None and ok.topic_id is not None
    assert ctx.partition(ok.topic_id, 1).isr == (1,) and ctx.partition(ok.topic_id, 1).leader == 1
    bad = create(
        ctx,
        CreatableTopic("u1", assignments={1: (1,)}),
        CreatableTopic("u2", assignments={0: (1, 1)}),
        CreatableTopic("u3", assignments={0: (9,)}),
        CreatableTopic("u4", assignments={0: (1,), 1: (1, 2)}),
        CreatableTopic("u5", assignments={0: (3,)}),
        CreatableTopic("u6", num_partitions=1, assignments={0: (1,)}),
    )
    assert [type(r.error) for r in bad] == [InvalidReplicaAssignmentError] * 5 + [
        InvalidRequestError
    ]


def test_create_partitions() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", partitions=1, factor=2)
    results = ctx.run(
        ctx.state.topics.create_partitions(
            [
                CreatePartitionsTopic("t", 3),
                CreatePartitionsTopic("nope", 2),
            ],
            False,
        )
    )
    assert results["t"] is None and isinstance(results["nope"], UnknownTopicOrPartitionError)
    assert len(ctx.state.replication.topics[topic].parts) == 3
    assert len(ctx.partition(topic, 2).replicas) == 2
    errors = ctx.state.topics.create_partitions(
        [
            CreatePartitionsTopic("t", 3),
        ],
        False,
    ).response
    assert isinstance(errors["t"], InvalidPartitionsError)
    assert errors["t"].message == "Topic already has 3 partition(s)."
    wrong = ctx.state.topics.create_partitions(
        [CreatePartitionsTopic("t", 5, assignments=((1, 2),))], False
    ).response
    assert isinstance(wrong["t"], InvalidReplicaAssignmentError)


def test_delete_topics_removes_partitions_and_configs() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1)
    topic = ctx.create_topic("t", **{"retention.ms": "1000"})
    ids = ctx.state.topics.find_topic_ids(["t", "u"])
    assert ids["t"] == topic and isinstance(ids["u"], UnknownTopicOrPartitionError)
    missing = uuid.UUID(int=3)
    results = ctx.run(ctx.state.topics.delete_topics([topic, missing]))
    assert results[topic] is None and isinstance(results[missing], UnknownTopicIdError)
    assert ctx.state.replication.topics == {}
    assert not ctx.state.replication.has_leaderships(1)
    assert list(ctx.state.configuration.records()) == []


def alter(
    ctx: ManagersContext, topic: uuid.UUID, broker: int, isr: tuple[int, ...], **kw: int
) -> object:
    part = ctx.partition(topic)
    data = AlterPartitionData(
        partition_index=0,
        leader_epoch=kw.get("leader_epoch", part.leader_epoch),
        new_isr=tuple((b, -1) for b in isr),
        partition_epoch=kw.get("partition_epoch", part.partition_epoch),
        leader_recovery_state=kw.get("leader_recovery_state", 0),
    )
    epoch = ctx.state.cluster.broker_registrations[broker].epoch
    [(_, _, [result])] = ctx.run(
        ctx.state.partitions.alter_partition(broker, epoch, [(topic, "t", [data])], 3)
    )
    return result.error if result.error is not None else result


def test_alter_partition_shrinks_and_expands_the_isr() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2, 3)
    topic = ctx.create_topic("t", factor=3)
    leader = ctx.partition(topic).leader
    others = tuple(b for b in (1, 2, 3) if b != leader)
    result = alter(ctx, topic, leader, (leader, others[0]))
    assert result.isr == (leader, others[0]) and result.partition_epoch == 1  # type: ignore[attr-defined]
    assert ctx.partition(topic).leader_epoch == 0
    result = alter(ctx, topic, leader, (leader, *others))
    assert ctx.partition(topic).isr == (leader, *others)


def test_alter_partition_errors_in_kafkas_order() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2, 3)
    topic = ctx.create_topic("t", factor=3)
    leader = ctx.partition(topic).leader
    follower = next(b for b in (1, 2, 3) if b != leader)
    full = (1, 2, 3)
    assert isinstance(alter(ctx, topic, leader, full, leader_epoch=1), NotControllerError)
    assert isinstance(alter(ctx, topic, leader, full, partition_epoch=1), NotControllerError)
    assert isinstance(alter(ctx, topic, follower, full), InvalidRequestError)
    assert isinstance(alter(ctx, topic, leader, (follower,)), InvalidRequestError)
    assert isinstance(alter(ctx, topic, leader, (leader, 7)), InvalidRequestError)
    alter(ctx, topic, leader, (leader,))
    assert isinstance(alter(ctx, topic, leader, full, partition_epoch=0), InvalidUpdateVersionError)
    ctx.heartbeat(follower, want_fence=True)
    error = alter(ctx, topic, leader, (leader, follower))
    assert isinstance(error, IneligibleReplicaError)
    assert error.error_code == ErrorCode.ineligible_replica
    with pytest.raises(StaleBrokerEpochError):
        ctx.state.partitions.alter_partition(leader, 999, [], 3)
    data = AlterPartitionData(0, 0, ((leader, -1),), 0)
    [(_, _, [unknown])] = ctx.state.partitions.alter_partition(
        leader,
        ctx.state.cluster.broker_registrations[leader].epoch,
        [(uuid.UUID(int=1), "", [data])],
        3,
    ).response
    assert isinstance(unknown.error, UnknownTopicIdError)


def test_alter_partition_with_an_older_leader_epoch_is_fenced() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", factor=2)
    leader = ctx.partition(topic).leader
    ctx.heartbeat(leader, want_fence=True)
    ctx.heartbeat(leader)
    new_leader = ctx.partition(topic).leader
    assert isinstance(alter(ctx, topic, new_leader, (1, 2), leader_epoch=0), FencedLeaderEpochError)


def test_elect_leaders_preferred_and_unclean() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", factor=2)
    preferred = ctx.partition(topic).replicas[0]
    other = 3 - preferred
    results = ctx.run(ctx.state.replication.elect_leaders(ElectionType.PREFERRED, {"t": [0, 5]}))
    assert isinstance(results[("t", 0)], ElectionNotNeededError)
    assert isinstance(results[("t", 5)], UnknownTopicOrPartitionError)
    ctx.heartbeat(preferred, want_fence=True)
    assert ctx.partition(topic).leader == other
    results = ctx.run(ctx.state.replication.elect_leaders(ElectionType.PREFERRED, {"t": [0]}))
    assert isinstance(results[("t", 0)], PreferredLeaderNotAvailableError)
    ctx.heartbeat(preferred)  # back, but not in the ISR
    alter(ctx, topic, other, (1, 2))
    assert ctx.run(ctx.state.replication.elect_leaders(ElectionType.PREFERRED, None)) == {
        ("t", 0): None
    }
    assert ctx.partition(topic).leader == preferred
    # Unclean: the only ISR member is gone and another replica is alive.
    ctx.heartbeat(other, want_fence=True)
    alter(ctx, topic, preferred, (preferred,))
    ctx.heartbeat(other)
    ctx.heartbeat(preferred, want_fence=True)
    assert ctx.partition(topic).leader == -1 and ctx.partition(topic).isr == (preferred,)
    results = ctx.run(ctx.state.replication.elect_leaders(ElectionType.UNCLEAN, {"t": [0]}))
    assert results == {("t", 0): None}
    assert ctx.partition(topic).leader == other and ctx.partition(topic).isr == (other,)
    assert ctx.partition(topic).leader_recovery_state == 1


def test_unclean_leader_election_enable_elects_on_fencing() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", factor=2, **{"unclean.leader.election.enable": "true"})
    leader = ctx.partition(topic).leader
    other = 3 - leader
    alter(ctx, topic, leader, (leader,))
    ctx.heartbeat(leader, want_fence=True)
    assert ctx.partition(topic).leader == other and ctx.partition(topic).isr == (other,)


def test_reassignment_adds_then_completes_through_alter_partition() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2, 3)
    topic = ctx.create_topic("t", factor=1)
    old = ctx.partition(topic).replicas[0]
    new = next(b for b in (1, 2, 3) if b != old)
    results = ctx.run(ctx.state.partitions.alter_partition_reassignments({"t": {0: (new,)}}))
    assert results == {("t", 0): None}
    part = ctx.partition(topic)
    assert part.replicas == (new, old) and part.adding_replicas == (new,)
    assert part.removing_replicas == (old,)
    assert ctx.state.partitions.list_partition_reassignments(None) == [
        OngoingReassignment("t", 0, (new, old), (new,), (old,))
    ]
    error = alter(ctx, topic, old, (old, new))
    assert isinstance(error, NewLeaderElectedError)
    part = ctx.partition(topic)
    assert part.replicas == (new,) and part.isr == (new,) and part.leader == new
    assert ctx.state.partitions.list_partition_reassignments({"t": [0]}) == []


def test_cancelling_a_reassignment_reverts_it() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2, 3)
    topic = ctx.create_topic("t", factor=1)
    old = ctx.partition(topic).replicas[0]
    new = next(b for b in (1, 2, 3) if b != old)
    ctx.run(ctx.state.partitions.alter_partition_reassignments({"t": {0: (new,)}}))
    results = ctx.run(ctx.state.partitions.alter_partition_reassignments({"t": {0: None}}))
    assert results == {("t", 0): None}
    part = ctx.partition(topic)
    assert part.replicas == (old,) and not part.is_reassigning
    results = ctx.run(
        ctx.state.partitions.alter_partition_reassignments({"t": {0: None}, "x": {0: (1,)}})
    )
    assert isinstance(results[("t", 0)], NoReassignmentInProgressError)
    assert isinstance(results[("x", 0)], UnknownTopicOrPartitionError)


def test_state_written_back_as_records_replays_to_the_same_state() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2, 3)
    topic = ctx.create_topic("t", partitions=3, factor=2, **{"retention.ms": "5"})
    ctx.heartbeat(1, want_fence=True)
    ctx.run(ctx.state.partitions.alter_partition_reassignments({"t": {0: (3,)}}))
    fresh = ManagersContext()
    fresh.replay(list(ctx.state.records()))
    assert fresh.state.replication.topics == ctx.state.replication.topics
    resource = ConfigResource(ConfigResourceType.TOPIC, "t")
    assert fresh.state.configuration.configs(resource) == {"retention.ms": "5"}
    assert fresh.state.replication.partitions_with_no_leader() == (
        ctx.state.replication.partitions_with_no_leader()
    )
    assert fresh.state.partitions.list_partition_reassignments(None) == (
        ctx.state.partitions.list_partition_reassignments(None)
    )
    assert topic in fresh.state.replication.topics


def test_max_partitions_bounds_the_cluster_before_any_placement() -> None:
    ctx = ManagersContext(max_partitions=10)
    ctx.add_brokers(1)
    ctx.create_topic("t", partitions=4)
    results = create(
        ctx,
        CreatableTopic("huge", num_partitions=2**31 - 1),
        CreatableTopic("u", num_partitions=4),
        CreatableTopic("v", num_partitions=4),
    )
    assert [type(r.error) for r in results] == [
        PolicyViolationError,
        type(None),
        PolicyViolationError,
    ]
    assert results[2].error is not None and results[2].error.message == (
        "Cannot add 4 partitions: the cluster has 8 and max.partitions is 10."
    )
    grown = ctx.state.topics.create_partitions(
        [CreatePartitionsTopic("t", 6), CreatePartitionsTopic("u", 6)], False
    ).response
    assert grown["t"] is None and isinstance(grown["u"], PolicyViolationError)


def test_balancing_moves_leadership_back_to_preferred_replicas() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", partitions=4, factor=2)
    replication = ctx.state.replication
    assert not replication.are_partition_leaders_imbalanced()
    ctx.heartbeat(1, want_fence=True)
    ctx.heartbeat(1)
    assert replication.are_partition_leaders_imbalanced()
    # Broker 1 is back but not in the ISRs yet: no preferred leader can be elected.
    assert ctx.run(replication.maybe_balance_partition_leaders(1000)) is False
    led_elsewhere = [p for p in range(4) if ctx.partition(topic, p).replicas[0] == 1]
    assert led_elsewhere and all(ctx.partition(topic, p).leader == 2 for p in led_elsewhere)
    for p in led_elsewhere:
        part = ctx.partition(topic, p)
        data = AlterPartitionData(p, part.leader_epoch, ((2, -1), (1, -1)), part.partition_epoch)
        epoch = ctx.state.cluster.broker_registrations[2].epoch
        ctx.run(ctx.state.partitions.alter_partition(2, epoch, [(topic, "t", [data])], 3))
    assert ctx.run(replication.maybe_balance_partition_leaders(1)) is True  # one at a time
    ctx.run(replication.maybe_balance_partition_leaders(1000))
    assert all(ctx.partition(topic, p).leader == 1 for p in led_elsewhere)
    assert not replication.are_partition_leaders_imbalanced()


def test_unclean_elections_follow_a_later_topic_setting() -> None:
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", factor=2)
    leader = ctx.partition(topic).leader
    other = 3 - leader
    part = ctx.partition(topic)
    data = AlterPartitionData(0, part.leader_epoch, ((leader, -1),), part.partition_epoch)
    epoch = ctx.state.cluster.broker_registrations[leader].epoch
    ctx.run(ctx.state.partitions.alter_partition(leader, epoch, [(topic, "t", [data])], 3))
    ctx.heartbeat(leader, want_fence=True)
    assert ctx.partition(topic).leader == -1
    assert ctx.run(ctx.state.replication.maybe_elect_unclean_leaders(1000)) is False
    assert ctx.partition(topic).leader == -1
    resource = ConfigResource(ConfigResourceType.TOPIC, "t")
    ctx.run(
        ctx.state.configuration.incremental_alter_configs(
            {resource: {"unclean.leader.election.enable": (OpType.SET, "true")}}
        )
    )
    ctx.run(ctx.state.replication.maybe_elect_unclean_leaders(1000))
    assert ctx.partition(topic).leader == other and ctx.partition(topic).isr == (other,)
