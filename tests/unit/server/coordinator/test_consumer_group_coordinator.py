"""KIP-848 consumer groups end to end on an in-memory __consumer_offsets: joining and the
records it writes, revocation before reassignment, epoch fencing, leaving, session and
rebalance timeouts, static members, regular expressions, offsets validated by member
epoch, the admin APIs, coexistence with classic groups, and what survives a reload."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from consumer_support import (
    Member,
    add_topic,
    consumer_records,
    group,
    partitions_of,
    settle,
)
from group_support import NOW, Clock, FakeReplicaManager, coordinator_config, join_params

from tiercel.protocol.errors import ErrorCode, NotLeaderOrFollowerError
from tiercel.server.coordinator.group.consumer_group_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from tiercel.server.coordinator.group.group_coordinator import GroupCoordinator
from tiercel.server.coordinator.group.group_metadata import GroupMetadata
from tiercel.server.coordinator.group.modern.consumer_group import ConsumerGroup, ConsumerGroupState
from tiercel.server.coordinator.group.modern.heartbeat_request import HeartbeatRequest
from tiercel.server.coordinator.group.modern.member import MemberState
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata
from tiercel.storage.topic_partition import TopicPartition

MakeCoordinator = Callable[..., Awaitable[GroupCoordinator]]
T0 = TopicPartition("t", 0)


def offset(value: int) -> dict[TopicPartition, OffsetAndMetadata]:
    return {T0: OffsetAndMetadata(value, -1, "", NOW)}


def snapshot(g: ConsumerGroup) -> tuple[Any, ...]:
    return (
        g.state,
        g.group_epoch,
        g.assignment_epoch,
        dict(g.members),
        dict(g.static_members),
        dict(g.target_assignment),
        dict(g.subscription_metadata),
        {regex: r.topics for regex, r in g.resolved_regexes.items()},
    )


# -- joining and reconciling -----------------------------------------------------------------


async def test_first_member_gets_every_partition_and_the_records_say_so(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    t = add_topic(c, "t", 4)
    m1 = Member(c, "m1")
    result = await m1.join()
    assert (result.member_id, result.member_epoch, result.heartbeat_interval_ms) == ("m1", 1, 5000)
    assert result.assignment == {t: frozenset(range(4))}
    assert [type(key) for key, _ in consumer_records(replicas, c)] == [
        ConsumerGroupMemberMetadataKey,
        ConsumerGroupPartitionMetadataKey,
        ConsumerGroupMetadataKey,
        ConsumerGroupTargetAssignmentMemberKey,
        ConsumerGroupTargetAssignmentMetadataKey,
        ConsumerGroupCurrentMemberAssignmentKey,
    ]
    assert group(c).state is ConsumerGroupState.STABLE
    # A heartbeat that changes nothing writes nothing and carries no assignment.
    before = len(consumer_records(replicas, c))
    again = await m1.beat()
    assert again.assignment is None
    assert len(consumer_records(replicas, c)) == before


async def test_partitions_move_only_once_revoked(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator()
    t = add_topic(c, "t", 4)
    m1, m2 = Member(c, "m1"), Member(c, "m2")
    await m1.join()
    joined = await m2.join()
    # m2 is at the new epoch but everything is still m1's.
    assert (joined.member_epoch, joined.assignment) == (2, {})
    assert group(c).members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    told = await m1.beat(act=False)  # m1 learns what to give up, has not yet
    assert told.member_epoch == 1
    kept = set(told.assignment[t]) if told.assignment else set()
    assert len(kept) == 2
    assert group(c).members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    assert (await m2.beat()).assignment is None  # still nothing free
    assert await m1.beat() is not None  # now it reports only what it kept
    assert m1.epoch == 2
    await m2.beat()
    assert partitions_of(m2, t) == set(range(4)) - kept
    assert group(c).state is ConsumerGroupState.STABLE


async def test_member_epochs_are_fenced(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator()
    t = add_topic(c, "t", 2)
    m1 = Member(c, "m1")
    await m1.join()
    await Member(c, "m2").join()
    await settle([m1])
    assert m1.epoch == 2
    assert (await m1.send(3)).error is ErrorCode.fenced_member_epoch
    assert (await m1.send(0)).error is ErrorCode.fenced_member_epoch
    # The previous epoch, owning only partitions it still has: its response was lost.
    lost = await m1.send(1, owned={t: frozenset(m1.owned[t])})
    assert (lost.error, lost.result and lost.result.member_epoch) == (ErrorCode.none, 2)
    # The previous epoch with a partition it no longer has is fenced.
    assert (await m1.send(1, owned={t: frozenset({0, 1})})).error is ErrorCode.fenced_member_epoch
    assert (await Member(c, "nobody").send(1)).error is ErrorCode.unknown_member_id
    assert (await Member(c, "m", group_id="other").send(1)).error is ErrorCode.group_id_not_found


async def test_invalid_requests(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator()
    add_topic(c, "t", 1)

    async def send(**fields: Any) -> ErrorCode:
        values: dict[str, Any] = {
            "group_id": "g",
            "member_id": "m",
            "member_epoch": 0,
            "rebalance_timeout_ms": 1000,
            "subscribed_topic_names": ("t",),
            "owned_partitions": {},
        }
        values.update(fields)
        return (await c.consumer_group_heartbeat(HeartbeatRequest(**values))).error

    assert await send(rebalance_timeout_ms=-1) is ErrorCode.invalid_request
    assert await send(owned_partitions=None) is ErrorCode.invalid_request
    assert await send(subscribed_topic_names=None) is ErrorCode.invalid_request
    assert await send(member_id="") is ErrorCode.invalid_request
    assert await send(member_epoch=-3) is ErrorCode.invalid_request
    assert await send(instance_id="") is ErrorCode.invalid_request
    assert await send(server_assignor="sticky") is ErrorCode.unsupported_assignor
    assert await send(subscribed_topic_regex="(") is ErrorCode.invalid_regular_expression
    # Version 0 lets the coordinator pick the member id.
    outcome = await c.consumer_group_heartbeat(
        HeartbeatRequest(
            "g", "", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("t",),
            owned_partitions={}, member_id_required=False,
        )
    )  # fmt: skip
    assert outcome.result is not None and len(outcome.result.member_id or "") == 22


async def test_leaving_bumps_the_epoch_and_frees_the_partitions(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    t = add_topic(c, "t", 4)
    m1, m2 = Member(c, "m1"), Member(c, "m2")
    await m1.join()
    await m2.join()
    await settle([m1, m2])
    epoch = group(c).group_epoch
    left = await m2.leave()
    assert (left.error, left.result and left.result.member_epoch) == (ErrorCode.none, -1)
    assert group(c).group_epoch == epoch + 1
    await settle([m1])
    assert partitions_of(m1, t) == set(range(4))
    assert (await m2.send(m2.epoch)).error is ErrorCode.unknown_member_id


async def test_group_max_size(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator(coordinator_config(consumer_group_max_size=1))
    add_topic(c, "t", 1)
    await Member(c, "m1").join()
    assert (await Member(c, "m2").send(0)).error is ErrorCode.group_max_size_reached


# -- timeouts --------------------------------------------------------------------------------


async def test_a_silent_member_is_fenced_after_its_session_timeout(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator(coordinator_config(consumer_group_session_timeout_ms=150))
    t = add_topic(c, "t", 4)
    m1, m2 = Member(c, "m1"), Member(c, "m2")
    await m1.join()
    await m2.join()
    await settle([m1, m2])
    assert partitions_of(m1, t) and partitions_of(m2, t)
    for _ in range(20):  # m1 keeps heartbeating, m2 is gone
        await asyncio.sleep(0.03)
        await m1.beat()
    assert set(group(c).members) == {"m1"}
    assert partitions_of(m1, t) == set(range(4))
    assert (await m2.send(m2.epoch)).error is ErrorCode.unknown_member_id


async def test_a_member_that_does_not_revoke_in_time_is_fenced(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    t = add_topic(c, "t", 2)
    slow = Member(c, "slow", rebalance_timeout_ms=100)
    await slow.join()
    other = Member(c, "other")
    await other.join()
    await slow.beat(act=False)  # told to revoke, never does
    assert group(c).members["slow"].state is MemberState.UNREVOKED_PARTITIONS
    for _ in range(10):
        await asyncio.sleep(0.03)
        await other.beat()
    assert set(group(c).members) == {"other"}
    assert partitions_of(other, t) == {0, 1}


# -- static members -------------------------------------------------------------------------


async def test_static_member_comes_back_under_a_new_id_with_its_partitions(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    t = add_topic(c, "t", 4)
    a = Member(c, "a1", instance_id="A")
    b = Member(c, "b1", instance_id="B")
    await a.join()
    await b.join()
    await settle([a, b])
    mine = partitions_of(a, t)
    epoch = group(c).group_epoch
    # A second incarnation while the first is still there.
    assert (
        await Member(c, "a2", instance_id="A").send(0)
    ).error is ErrorCode.unreleased_instance_id
    left = await a.leave(-2)
    assert left.result is not None and left.result.member_epoch == -2
    assert group(c).members["a1"].member_epoch == -2
    back = Member(c, "a2", instance_id="A")
    result = await back.join()
    assert result.assignment == {t: frozenset(mine)}
    assert group(c).group_epoch == epoch  # no rebalance
    assert set(group(c).members) == {"a2", "b1"}
    assert group(c).static_members == {"A": "a2", "B": "b1"}
    # The old incarnation is fenced.
    assert (await a.send(a.epoch)).error is ErrorCode.fenced_instance_id
    await settle([back, b])
    assert partitions_of(back, t) == mine


# -- regular expressions ---------------------------------------------------------------------


async def test_regex_subscriptions_follow_new_topics(make_coordinator: MakeCoordinator) -> None:
    clock = Clock()
    c = await make_coordinator(clock=clock)
    orders1 = add_topic(c, "orders-1", 2)
    orders2 = add_topic(c, "orders-2", 1)
    add_topic(c, "other", 3)
    m = Member(c, "m", topics=(), regex="orders-.*")
    await m.join()
    assert m.owned == {orders1: frozenset({0, 1}), orders2: frozenset({0})}
    assert group(c).resolved_regexes["orders-.*"].topics == {"orders-1", "orders-2"}
    orders3 = add_topic(c, "orders-3", 1)
    await m.beat()
    assert orders3 not in m.owned  # resolutions are refreshed at most every 10 s
    clock.now += 10_001
    await m.beat()
    await m.beat()
    assert m.owned[orders3] == frozenset({0})
    assert group(c).is_subscribed_to_topic("orders-3")
    assert not group(c).is_subscribed_to_topic("other")
    await m.leave()
    assert group(c).resolved_regexes == {}


# -- persistence -----------------------------------------------------------------------------


async def test_group_state_survives_a_reload(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    clock = Clock()
    c = await make_coordinator(clock=clock)
    add_topic(c, "t", 5)
    add_topic(c, "orders", 2)
    members = [
        Member(c, "m1", instance_id="I1"),
        Member(c, "m2", regex="ord.*", topics=()),
        Member(c, "m3", assignor="range"),
    ]
    for m in members:
        await m.join()
    await settle(members[:2])  # m3 is still reconciling
    await members[0].leave(-2)
    before = snapshot(group(c))
    restarted = await make_coordinator(clock=clock)
    for tp in replicas.partitions:  # the old coordinator gives the partitions up
        c.on_leadership_change(tp, None)
    add_topic(restarted, "t", 5)
    restarted.manager.metadata_cache.topics["orders"] = c.manager.metadata_cache.topics["orders"]
    assert snapshot(group(restarted)) == before
    # Members carry on with their epochs.
    for m in members[1:]:
        m.c = restarted
        await m.beat()
    assert group(restarted).members["m1"].member_epoch == -2


async def test_sessions_restart_after_a_reload(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    config = coordinator_config(consumer_group_session_timeout_ms=100)
    c = await make_coordinator(config)
    add_topic(c, "t", 1)
    await Member(c, "m1").join()
    for tp in replicas.partitions:
        c.on_leadership_change(tp, None)
    restarted = await make_coordinator(config)
    assert set(group(restarted).members) == {"m1"}
    await asyncio.sleep(0.3)
    assert group(restarted).members == {}


# -- offsets ---------------------------------------------------------------------------------


async def test_offsets_of_a_consumer_group_are_validated_by_member_epoch(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    add_topic(c, "t", 1)
    m = Member(c, "m")
    await m.join()
    assert await c.commit_offsets("g", "m", None, m.epoch, offset(5), 9) == {T0: ErrorCode.none}
    stale = await c.commit_offsets("g", "m", None, m.epoch - 1, offset(6), 9)
    assert stale == {T0: ErrorCode.stale_member_epoch}
    old_version = await c.commit_offsets("g", "m", None, m.epoch, offset(6), 8)
    assert old_version == {T0: ErrorCode.unsupported_version}
    stranger = await c.commit_offsets("g", "x", None, m.epoch, offset(6), 9)
    assert stranger == {T0: ErrorCode.unknown_member_id}
    # Admin commits (no epoch) are refused while the group has members.
    assert await c.commit_offsets("g", "", None, -1, offset(6), 9) == {
        T0: ErrorCode.unknown_member_id
    }
    error, offsets = c.fetch_offsets("g", [T0], "m", m.epoch)
    assert (error, offsets[T0] and offsets[T0].committed_offset) == (ErrorCode.none, 5)
    assert c.fetch_offsets("g", [T0], "m", m.epoch + 1)[0] is ErrorCode.stale_member_epoch
    assert c.fetch_offsets("g", [T0], "x", 1)[0] is ErrorCode.unknown_member_id
    assert c.fetch_offsets("g", [T0])[0] is ErrorCode.none  # an admin client
    await m.leave()
    assert await c.commit_offsets("g", "", None, -1, offset(7), 9) == {T0: ErrorCode.none}


# -- administration and coexistence ------------------------------------------------------------


async def test_list_describe_and_delete(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    t = add_topic(c, "t", 2)
    m = Member(c, "m")
    await m.join()
    await c.commit_offsets("g", "m", None, m.epoch, offset(1), 9)
    error, listed = c.list_groups([], ["Consumer"])
    assert error is ErrorCode.none
    assert [(g.group_id, g.protocol_type, g.state, g.group_type) for g in listed] == [
        ("g", "consumer", "Stable", "consumer")
    ]
    assert c.list_groups([], ["classic"])[1] == []
    assert [g.group_id for g in c.list_groups(["stable"], [])[1]] == ["g"]
    [described] = c.consumer_group_describe(["g"])
    assert (described.state, described.group_epoch, described.assignor_name) == (
        "Stable",
        1,
        "uniform",
    )
    [member] = described.members
    assert (member.member_id, member.assignment, member.target_assignment) == (
        "m",
        {t: frozenset({0, 1})},
        {t: frozenset({0, 1})},
    )
    assert c.consumer_group_describe(["nope"])[0].error is ErrorCode.group_id_not_found
    assert c.describe_group("g")[1].state == "Dead"  # DescribeGroups is for classic groups
    assert (await c.delete_groups(["g"]))["g"] is ErrorCode.non_empty_group
    error, results = await c.delete_offsets("g", [T0])
    assert (error, results) == (ErrorCode.none, {T0: ErrorCode.group_subscribed_to_topic})
    await m.leave()
    assert (await c.delete_groups(["g"]))["g"] is ErrorCode.none
    assert "g" not in c.manager.groups
    tombstones = [k for k, v in consumer_records(replicas, c)[-3:] if v is None]
    assert [type(k) for k in tombstones] == [
        ConsumerGroupTargetAssignmentMetadataKey,
        ConsumerGroupPartitionMetadataKey,
        ConsumerGroupMetadataKey,
    ]
    assert c.fetch_offsets("g", [T0])[1] == {T0: None}


async def test_a_group_id_is_one_type_at_a_time(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    add_topic(c, "t", 1)
    # An offsets-only (simple, Empty) classic group becomes a consumer group; its
    # offsets stay.
    assert await c.commit_offsets("g", "", None, -1, offset(3), 9) == {T0: ErrorCode.none}
    assert isinstance(c.manager.groups["g"], GroupMetadata)
    m = Member(c, "m")
    await m.join()
    assert isinstance(c.manager.groups["g"], ConsumerGroup)
    assert c.fetch_offsets("g", [T0], "m", m.epoch)[1][T0] is not None
    # A classic member cannot join a live consumer group.
    joined = await c.join_group(join_params(group_id="g"))
    assert joined.error is ErrorCode.inconsistent_group_protocol
    # Once it is Empty, a classic member takes the id over.
    await m.leave()
    joined = await c.join_group(join_params(group_id="g"))
    assert joined.error is ErrorCode.none
    assert isinstance(c.manager.groups["g"], GroupMetadata)
    assert consumer_records(replicas, c)[-1] == (ConsumerGroupMetadataKey("g"), None)
    # ... and a consumer member cannot join the live classic group.
    assert (await Member(c, "m2").send(0)).error is ErrorCode.group_id_not_found
    synced = await c.sync_group(
        "g", joined.generation_id, joined.member_id, "consumer", "range", None, {}
    )
    assert synced.error is ErrorCode.none
    # Reloaded, the id is the classic group's: the consumer group's records are
    # tombstones, the classic group's record came last.
    for tp in replicas.partitions:
        c.on_leadership_change(tp, None)
    restarted = await make_coordinator()
    reloaded = restarted.manager.groups["g"]
    assert isinstance(reloaded, GroupMetadata)
    assert set(reloaded.members) == {joined.member_id}
    assert restarted.fetch_offsets("g", [T0])[1][T0] is not None


async def test_a_failed_write_changes_nothing(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    add_topic(c, "t", 1)
    replicas.fail_with = NotLeaderOrFollowerError()
    assert (await Member(c, "m").send(0)).error is ErrorCode.not_coordinator
    assert "g" not in c.manager.groups
    replicas.fail_with = None
    m = Member(c, "m")
    await m.join()
    before = snapshot(group(c))
    replicas.fail_with = NotLeaderOrFollowerError()
    assert (await Member(c, "m2").send(0)).error is ErrorCode.not_coordinator
    assert snapshot(group(c)) == before


async def test_expired_offsets_and_empty_groups_are_cleaned_up(
    make_coordinator: MakeCoordinator,
) -> None:
    clock = Clock()
    c = await make_coordinator(clock=clock)
    add_topic(c, "t", 1)
    add_topic(c, "u", 1)
    m = Member(c, "m")
    await m.join()
    unsubscribed = {TopicPartition("u", 0): OffsetAndMetadata(1, -1, "", NOW)}
    await c.commit_offsets("g", "m", None, m.epoch, {**offset(1), **unsubscribed}, 9)
    clock.now += 120_000  # past offsets.retention (60 s in these tests)
    assert await c.manager.cleanup_expired_offsets() == 1  # only the unsubscribed topic's
    await m.leave()
    assert await c.manager.cleanup_expired_offsets() == 1
    assert "g" not in c.manager.groups


async def test_epoch_record_value_is_the_new_group_epoch(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    add_topic(c, "t", 1)
    await Member(c, "m1").join()
    await Member(c, "m2").join()
    epochs = [
        v for k, v in consumer_records(replicas, c) if isinstance(k, ConsumerGroupMetadataKey)
    ]
    assert epochs == [ConsumerGroupMetadataValue(1), ConsumerGroupMetadataValue(2)]
    regexes = [
        k
        for k, _ in consumer_records(replicas, c)
        if isinstance(k, ConsumerGroupRegularExpressionKey)
    ]
    assert regexes == []


async def test_a_group_recreated_while_its_tombstones_are_written_survives_a_reload(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    add_topic(c, "t", 1)
    # Two Empty groups on different partitions: "g"'s tombstones are written second.
    first = next(f"a{i}" for i in range(100) if c.partition_for(f"a{i}") != c.partition_for("g"))
    for group_id in (first, "g"):
        member = Member(c, "m", group_id=group_id)
        await member.join()
        await member.leave()
    slow_partition = c.partition_for(first)
    append = replicas.append_records

    async def slow_append(timeout: int, acks: int, entries: Any, **kw: Any) -> Any:
        if any(tp.partition == slow_partition for tp in entries):
            await asyncio.sleep(0.05)
        return await append(timeout, acks, entries, **kw)

    replicas.append_records = slow_append  # type: ignore[method-assign]
    deleting = asyncio.create_task(c.delete_groups([first, "g"]))
    await asyncio.sleep(0)
    joined = await Member(c, "m2", group_id="g").join()
    assert (await deleting)["g"] is ErrorCode.none
    assert joined.member_epoch == 1
    for tp in replicas.partitions:
        c.on_leadership_change(tp, None)
    restarted = await make_coordinator()
    assert set(group(restarted, "g").members) == {"m2"}
