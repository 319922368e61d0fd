"""The classic group coordinator end to end on an in-memory __consumer_offsets: join and
sync, KIP-394 and KIP-345, fencing, session expiry, the initial rebalance delay, offsets
(commit, fetch, expiry, deletion) and what survives a reload of the partitions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace

from group_support import (
    NOW,
    Clock,
    FakeReplicaManager,
    coordinator_config,
    join_params,
    subscription,
)

from tiercel.protocol.errors import ErrorCode, NotLeaderOrFollowerError
from tiercel.server.coordinator.group.coordinator_records import GroupMetadataKey, OffsetCommitKey
from tiercel.server.coordinator.group.group_coordinator import GroupCoordinator
from tiercel.server.coordinator.group.group_join import JoinGroupParams
from tiercel.server.coordinator.group.group_metadata import GroupState
from tiercel.server.coordinator.group.group_results import JoinGroupResult
from tiercel.server.coordinator.group.membership import LeavingMember
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata
from tiercel.storage.topic_partition import TopicPartition

MakeCoordinator = Callable[..., Awaitable[GroupCoordinator]]
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def offset(value: int, metadata: str = "", ts: int = NOW) -> OffsetAndMetadata:
    return OffsetAndMetadata(value, -1, metadata, ts)


async def join_new(c: GroupCoordinator, params: JoinGroupParams) -> JoinGroupResult:
    """KIP-394: the first JoinGroup only hands out a member id."""
    first = await c.join_group(replace(params, require_known_member_id=True))
    assert first.error is ErrorCode.member_id_required
    assert first.member_id.startswith(params.client_id + "-")
    return await c.join_group(replace(params, member_id=first.member_id))


async def stable_pair(c: GroupCoordinator) -> tuple[str, str, int]:
    """Two members m1 (leader) and m2 in a Stable group "g"; their ids and generation."""
    first = await join_new(c, join_params(client_id="c1"))
    assert (first.error, first.generation_id, first.leader_id) == (
        ErrorCode.none,
        1,
        first.member_id,
    )
    m1 = first.member_id
    second = asyncio.create_task(join_new(c, join_params(client_id="c2")))
    while c.manager.groups["g"].state is not GroupState.PREPARING_REBALANCE:
        await asyncio.sleep(0.001)
    assert c.heartbeat("g", m1, None, 1) is ErrorCode.rebalance_in_progress
    rejoin = await c.join_group(join_params(member_id=m1))
    joined = await second
    m2 = joined.member_id
    assert rejoin.generation_id == joined.generation_id == 2
    assert rejoin.leader_id == joined.leader_id == m1
    assert {m.member_id for m in rejoin.members} == {m1, m2}
    assert joined.members == ()  # only the leader learns the members
    leader_sync = asyncio.create_task(
        c.sync_group("g", 2, m1, "consumer", "range", None, {m1: b"a1", m2: b"a2"})
    )
    follower = await c.sync_group("g", 2, m2, "consumer", "range", None, {})
    leader = await leader_sync
    assert (leader.error, leader.assignment) == (ErrorCode.none, b"a1")
    assert (follower.error, follower.assignment, follower.protocol_name) == (
        ErrorCode.none,
        b"a2",
        "range",
    )
    assert c.manager.groups["g"].is_(GroupState.STABLE)
    return m1, m2, 2


async def test_join_and_sync_give_each_member_its_assignment(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    _m1, m2, generation = await stable_pair(c)
    log = replicas.log_for("g", c.manager)
    group_records = [v for k, v in log.records() if k == GroupMetadataKey("g")]
    assert group_records and group_records[-1] is not None  # the assignment is durable
    assert c.heartbeat("g", m2, None, generation) is ErrorCode.none
    assert all(replicas.internal_flags)  # coordinator writes may go to internal topics
    assert set(replicas.required_acks) == {-1}  # the generation is durable on the ISR


async def test_a_follower_rejoining_with_same_metadata_gets_the_current_generation(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    m1, m2, generation = await stable_pair(c)
    again = await c.join_group(join_params(member_id=m2, client_id="c2"))
    assert (again.error, again.generation_id, again.leader_id) == (ErrorCode.none, generation, m1)
    assert c.manager.groups["g"].is_(GroupState.STABLE)


async def test_generation_and_member_fencing(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator()
    m1, _m2, generation = await stable_pair(c)
    assert c.heartbeat("g", m1, None, generation - 1) is ErrorCode.illegal_generation
    assert c.heartbeat("g", "stranger", None, generation) is ErrorCode.unknown_member_id
    assert c.heartbeat("other", m1, None, generation) is ErrorCode.unknown_member_id
    old = await c.commit_offsets("g", m1, None, generation - 1, {T0: offset(5)}, 8)
    assert old == {T0: ErrorCode.illegal_generation}
    outsider = await c.commit_offsets("g", "", None, -1, {T0: offset(5)}, 8)
    assert outsider == {T0: ErrorCode.unknown_member_id}
    sync = await c.sync_group("g", generation + 1, m1, None, None, None, {})
    assert sync.error is ErrorCode.illegal_generation
    wrong_protocol = await c.sync_group("g", generation, m1, "consumer", "roundrobin", None, {})
    assert wrong_protocol.error is ErrorCode.inconsistent_group_protocol


async def test_commit_while_completing_rebalance_is_refused(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    joined = await c.join_group(join_params())
    group = c.manager.groups["g"]
    assert group.is_(GroupState.COMPLETING_REBALANCE)
    result = await c.commit_offsets("g", joined.member_id, None, 1, {T0: offset(3)}, 8)
    assert result == {T0: ErrorCode.rebalance_in_progress}
    assert c.heartbeat("g", joined.member_id, None, 1) is ErrorCode.none


async def test_session_expiry_hands_the_partitions_to_the_survivor(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    fast = join_params(client_id="c1", session_ms=150)
    first = await c.join_group(fast)
    m1 = first.member_id
    await c.sync_group("g", 1, m1, None, None, None, {m1: b"all"})
    second = asyncio.create_task(c.join_group(replace(fast, client_id="c2")))
    await asyncio.sleep(0.01)
    rejoin = await c.join_group(replace(fast, member_id=m1))
    m2 = (await second).member_id
    assert rejoin.generation_id == 2
    await c.sync_group("g", 2, m1, None, None, None, {m1: b"half", m2: b"half"})
    await c.sync_group("g", 2, m2, None, None, None, {})
    # m2 dies; m1 keeps heartbeating until it is told to rejoin.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 2
    while c.heartbeat("g", m1, None, 2) is ErrorCode.none:
        assert loop.time() < deadline, "the dead member was never expired"
        await asyncio.sleep(0.02)
    alone = await c.join_group(replace(fast, member_id=m1))
    assert (alone.error, alone.generation_id, [m.member_id for m in alone.members]) == (
        ErrorCode.none,
        3,
        [m1],
    )
    assert c.heartbeat("g", m2, None, 2) is ErrorCode.unknown_member_id


async def test_initial_rebalance_delay_gathers_members_into_one_generation(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator(coordinator_config(group_initial_rebalance_delay_ms=150))
    joins = [asyncio.create_task(c.join_group(join_params(client_id=f"c{i}"))) for i in range(3)]
    results = await asyncio.gather(*joins)
    assert {r.generation_id for r in results} == {1}
    leaders = [r for r in results if r.members]
    assert len(leaders) == 1 and len(leaders[0].members) == 3


async def test_pending_member_expires_if_it_never_joins_again(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    first = await c.join_group(join_params(require_known=True, session_ms=50))
    group = c.manager.groups["g"]
    assert group.is_pending_member(first.member_id)
    await asyncio.sleep(0.15)
    assert not group.is_pending_member(first.member_id)
    late = await c.join_group(join_params(member_id=first.member_id))
    assert late.error is ErrorCode.unknown_member_id


async def test_static_member_restart_keeps_generation_and_assignment(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    static = join_params(instance_id="i1", client_id="s")
    first = await c.join_group(static)
    old_id = first.member_id
    assert old_id.startswith("i1-")
    await c.sync_group("g", 1, old_id, None, None, "i1", {old_id: b"mine"})
    # The process restarts within its session: same instance id, no member id.
    again = await c.join_group(static)
    new_id = again.member_id
    assert new_id != old_id
    assert (again.error, again.generation_id, again.leader_id) == (ErrorCode.none, 1, new_id)
    assert again.skip_assignment  # v9: the leader must not assign again
    sync = await c.sync_group("g", 1, new_id, None, None, "i1", {})
    assert (sync.error, sync.assignment) == (ErrorCode.none, b"mine")
    assert c.manager.groups["g"].is_(GroupState.STABLE)
    # The old incarnation is fenced.
    assert c.heartbeat("g", old_id, "i1", 1) is ErrorCode.fenced_instance_id
    commit = await c.commit_offsets("g", old_id, "i1", 1, {T0: offset(1)}, 8)
    assert commit == {T0: ErrorCode.fenced_instance_id}
    # Older clients (JoinGroup < v9) are told the previous leader id.
    older = await c.join_group(replace(static, support_skipping_assignment=False))
    assert (older.leader_id, older.skip_assignment) == (new_id, False)


async def test_static_member_is_removed_by_instance_id(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator()
    first = await c.join_group(join_params(instance_id="i1"))
    error, results = c.leave_group("g", [LeavingMember("", "i1", "admin"), LeavingMember("", "i9")])
    assert error is ErrorCode.none
    assert [r.error for r in results] == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert c.heartbeat("g", first.member_id, "i1", 1) is ErrorCode.unknown_member_id


async def test_leave_group_rebalances_the_rest(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator()
    m1, m2, _ = await stable_pair(c)
    error, results = c.leave_group("g", [LeavingMember(m2, None)])
    assert (error, [r.error for r in results]) == (ErrorCode.none, [ErrorCode.none])
    assert c.manager.groups["g"].is_(GroupState.PREPARING_REBALANCE)
    alone = await c.join_group(join_params(member_id=m1))
    assert (alone.generation_id, len(alone.members)) == (3, 1)


async def test_join_validation_errors(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator()
    assert (await c.join_group(join_params(group_id=""))).error is ErrorCode.invalid_group_id
    short = await c.join_group(join_params(session_ms=1))
    assert short.error is ErrorCode.invalid_session_timeout
    unknown = await c.join_group(join_params(group_id="nobody", member_id="m-1"))
    assert unknown.error is ErrorCode.unknown_member_id
    await c.join_group(join_params())
    other_protocol = await c.join_group(join_params(protocols=(("roundrobin", b""),)))
    assert other_protocol.error is ErrorCode.inconsistent_group_protocol


async def test_group_max_size(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator(coordinator_config(group_max_size=1))
    assert (await c.join_group(join_params())).error is ErrorCode.none
    full = await c.join_group(join_params())
    assert (full.error, full.member_id) == (ErrorCode.group_max_size_reached, "")


async def test_requests_for_partitions_not_led_or_loading(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    tp = next(iter(replicas.partitions))
    group_id = next(g for g in (f"g{i}" for i in range(100)) if c.partition_for(g) == tp.partition)
    c.on_leadership_change(tp, None)
    assert (await c.join_group(join_params(group_id))).error is ErrorCode.not_coordinator
    c.on_leadership_change(tp, 1)  # loads in the background
    assert (await c.join_group(join_params(group_id))).error is (
        ErrorCode.coordinator_load_in_progress
    )
    assert c.heartbeat(group_id, "m", None, 1) is ErrorCode.none  # answered blindly
    sync = await c.sync_group(group_id, 1, "m", None, None, None, {})
    assert sync.error is ErrorCode.rebalance_in_progress
    while c.manager.is_loading:
        await asyncio.sleep(0.001)
    assert (await c.join_group(join_params(group_id))).error is ErrorCode.none


async def test_losing_leadership_answers_parked_joins(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator(coordinator_config(group_initial_rebalance_delay_ms=10_000))
    parked = asyncio.create_task(c.join_group(join_params()))
    await asyncio.sleep(0.01)
    tp = next(tp for tp in replicas.partitions if tp.partition == c.partition_for("g"))
    c.on_leadership_change(tp, None)
    assert (await asyncio.wait_for(parked, 1)).error is ErrorCode.not_coordinator
    assert "g" not in c.manager.groups


async def test_offsets_commit_fetch_and_survive_a_reload(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    m1, m2, generation = await stable_pair(c)
    result = await c.commit_offsets(
        "g", m1, None, generation, {T0: offset(10, "meta-é"), T1: offset(20)}, 8
    )
    assert result == {T0: ErrorCode.none, T1: ErrorCode.none}
    error, fetched = c.fetch_offsets("g", [T0, T1, TopicPartition("t", 2)])
    assert error is ErrorCode.none
    assert fetched[T0] is not None and (fetched[T0].committed_offset, fetched[T0].metadata) == (
        10,
        "meta-é",
    )
    assert fetched[TopicPartition("t", 2)] is None
    # A second coordinator over the same log: what a restart reads back.
    restarted = await make_coordinator()
    group = restarted.manager.groups["g"]
    assert (group.state, group.generation_id, set(group.members)) == (
        GroupState.STABLE,
        generation,
        {m1, m2},
    )
    assert group.get(m2).assignment == b"a2"
    _, reloaded = restarted.fetch_offsets("g", None)
    assert {tp: o.committed_offset for tp, o in reloaded.items() if o} == {T0: 10, T1: 20}
    assert reloaded[T0] is not None and reloaded[T0].metadata == "meta-é"
    # Reloaded members must heartbeat within their session like any other.
    assert restarted.heartbeat("g", m1, None, generation) is ErrorCode.none


async def test_simple_group_commits_without_membership(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    result = await c.commit_offsets("simple", "", None, -1, {T0: offset(7)}, 8)
    assert result == {T0: ErrorCode.none}
    # Answered once written with acks=-1 (Kafka's appendForGroup): on the whole ISR, so
    # that any replica a failover elects has it.
    assert replicas.required_acks == [-1]
    assert c.manager.groups["simple"].is_(GroupState.EMPTY)
    with_generation = await c.commit_offsets("unknown", "m", None, 3, {T0: offset(1)}, 8)
    assert with_generation == {T0: ErrorCode.illegal_generation}
    v9 = await c.commit_offsets("unknown", "m", None, 3, {T0: offset(1)}, 9)
    assert v9 == {T0: ErrorCode.group_id_not_found}


async def test_oversized_metadata_and_failed_writes(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator(coordinator_config(offset_metadata_max_bytes=4))
    big = await c.commit_offsets("s", "", None, -1, {T0: offset(1, "12345"), T1: offset(2, "1")}, 8)
    assert big == {T0: ErrorCode.offset_metadata_too_large, T1: ErrorCode.none}
    replicas.fail_with = NotLeaderOrFollowerError()
    failed = await c.commit_offsets("s", "", None, -1, {T1: offset(9)}, 8)
    assert failed == {T1: ErrorCode.not_coordinator}
    _, fetched = c.fetch_offsets("s", [T1])
    assert fetched[T1] is not None and fetched[T1].committed_offset == 2  # unchanged


async def test_failed_assignment_write_makes_members_rejoin(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    joined = await c.join_group(join_params())
    replicas.fail_with = NotLeaderOrFollowerError()
    sync = await c.sync_group("g", 1, joined.member_id, None, None, None, {joined.member_id: b"x"})
    assert sync.error is ErrorCode.not_coordinator
    assert c.manager.groups["g"].is_(GroupState.PREPARING_REBALANCE)


async def test_delete_groups_writes_tombstones(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    m1, m2, generation = await stable_pair(c)
    await c.commit_offsets("g", m1, None, generation, {T0: offset(4)}, 8)
    assert await c.delete_groups(["g", "missing"]) == {
        "g": ErrorCode.non_empty_group,
        "missing": ErrorCode.group_id_not_found,
    }
    c.leave_group("g", [LeavingMember(m1, None), LeavingMember(m2, None)])
    assert c.manager.groups["g"].is_(GroupState.EMPTY)
    assert await c.delete_groups(["g"]) == {"g": ErrorCode.none}
    records = replicas.log_for("g", c.manager).records()
    assert (OffsetCommitKey("g", "t", 0), None) in records
    assert records[-1] == (GroupMetadataKey("g"), None)
    assert c.describe_group("g") == (ErrorCode.none, c.describe_group("never")[1])
    restarted = await make_coordinator()
    assert "g" not in restarted.manager.groups
    assert restarted.fetch_offsets("g", [T0])[1] == {T0: None}


async def test_offsets_of_empty_groups_expire(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    clock = Clock()
    c = await make_coordinator(coordinator_config(offsets_retention_ms=1000), clock)
    joined = await c.join_group(join_params())
    member = joined.member_id
    await c.sync_group("g", 1, member, None, None, None, {member: b""})
    await c.commit_offsets("g", member, None, 1, {T0: offset(1)}, 8)
    c.leave_group("g", [LeavingMember(member, None)])
    await asyncio.sleep(0.01)
    clock.now += 999
    assert await c.manager.cleanup_expired_offsets() == 0
    clock.now += 1
    assert await c.manager.cleanup_expired_offsets() == 1
    assert "g" not in c.manager.groups
    tail = replicas.log_for("g", c.manager).records()[-2:]
    assert tail == [(OffsetCommitKey("g", "t", 0), None), (GroupMetadataKey("g"), None)]


async def test_stable_consumer_group_offsets_of_unsubscribed_topics_expire(
    make_coordinator: MakeCoordinator,
) -> None:
    clock = Clock()
    c = await make_coordinator(coordinator_config(offsets_retention_ms=1000), clock)
    joined = await c.join_group(join_params(protocols=(("range", subscription(["t"])),)))
    member = joined.member_id
    await c.sync_group("g", 1, member, None, None, None, {member: b""})
    other = TopicPartition("old-topic", 0)
    await c.commit_offsets("g", member, None, 1, {T0: offset(1), other: offset(2)}, 8)
    clock.now += 5000
    assert await c.manager.cleanup_expired_offsets() == 1
    assert c.fetch_offsets("g", None)[1].keys() == {T0}


async def test_explicit_retention_of_old_commit_versions(make_coordinator: MakeCoordinator) -> None:
    clock = Clock()
    c = await make_coordinator(coordinator_config(offsets_retention_ms=10**9), clock)
    expiring = OffsetAndMetadata(1, -1, "", NOW, NOW + 500)
    await c.commit_offsets("s", "", None, -1, {T0: expiring, T1: offset(2)}, 2)
    clock.now += 500
    assert await c.manager.cleanup_expired_offsets() == 1
    assert c.fetch_offsets("s", None)[1].keys() == {T1}


async def test_offset_delete_spares_subscribed_topics(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator()
    joined = await c.join_group(join_params(protocols=(("range", subscription(["t"])),)))
    member = joined.member_id
    await c.sync_group("g", 1, member, None, None, None, {member: b""})
    other = TopicPartition("u", 0)
    await c.commit_offsets("g", member, None, 1, {T0: offset(1), other: offset(2)}, 8)
    error, results = await c.delete_offsets("g", [T0, other])
    assert error is ErrorCode.none
    assert results == {T0: ErrorCode.group_subscribed_to_topic, other: ErrorCode.none}
    assert c.fetch_offsets("g", None)[1].keys() == {T0}
    assert (await c.delete_offsets("nope", [T0]))[0] is ErrorCode.group_id_not_found


async def test_list_and_describe_groups(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator()
    m1, m2, _ = await stable_pair(c)
    await c.commit_offsets("simple", "", None, -1, {T0: offset(1)}, 8)
    error, groups = c.list_groups((), ())
    assert error is ErrorCode.none
    assert {(g.group_id, g.state, g.protocol_type, g.group_type) for g in groups} == {
        ("g", "Stable", "consumer", "classic"),
        ("simple", "Empty", "", "classic"),
    }
    assert [g.group_id for g in c.list_groups(["STABLE"], [])[1]] == ["g"]
    assert c.list_groups([], ["consumer"])[1] == []
    error, summary = c.describe_group("g")
    assert (error, summary.state, summary.protocol) == (ErrorCode.none, "Stable", "range")
    members = {m.member_id: m for m in summary.members}
    assert members.keys() == {m1, m2}
    assert (members[m2].assignment, members[m2].client_host) == (b"a2", "/127.0.0.1")
    assert members[m2].metadata == subscription(["t"])
    assert c.describe_group("never")[1].state == "Dead"


async def test_shutdown_answers_everything_parked(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator(coordinator_config(group_initial_rebalance_delay_ms=10_000))
    parked = asyncio.create_task(c.join_group(join_params()))
    await asyncio.sleep(0.01)
    await c.shutdown()
    assert (await asyncio.wait_for(parked, 1)).error is ErrorCode.not_coordinator
    assert (await c.join_group(join_params())).error is ErrorCode.coordinator_not_available


async def test_a_restarted_static_member_fences_its_parked_join(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator(coordinator_config(group_initial_rebalance_delay_ms=10_000))
    static = join_params(instance_id="i1")
    parked = asyncio.create_task(c.join_group(static))
    await asyncio.sleep(0.01)
    replacement = asyncio.create_task(c.join_group(static))
    assert (await asyncio.wait_for(parked, 1)).error is ErrorCode.fenced_instance_id
    await c.shutdown()
    assert (await asyncio.wait_for(replacement, 1)).error is ErrorCode.not_coordinator


async def test_a_static_leader_restarting_mid_rebalance_restarts_the_rebalance(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    first = await c.join_group(join_params(instance_id="i1"))
    other = asyncio.create_task(c.join_group(join_params(client_id="x")))
    await asyncio.sleep(0.01)
    await c.join_group(join_params(member_id=first.member_id, instance_id="i1"))
    follower = (await other).member_id
    parked = asyncio.create_task(c.sync_group("g", 2, follower, None, None, None, {}))
    await asyncio.sleep(0.01)
    assert not parked.done()
    # The leader restarts before it sent the assignment: the follower must rejoin.
    rejoin = asyncio.create_task(c.join_group(join_params(instance_id="i1")))
    assert (await asyncio.wait_for(parked, 1)).error is ErrorCode.rebalance_in_progress
    assert c.manager.groups["g"].is_(GroupState.PREPARING_REBALANCE)
    await c.join_group(join_params(member_id=follower, client_id="x"))
    assert (await asyncio.wait_for(rejoin, 1)).generation_id == 3


async def test_compressed_coordinator_batches_load_back(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    zstd = coordinator_config(offsets_topic_compression_codec=4)
    c = await make_coordinator(zstd)
    await c.commit_offsets("z", "", None, -1, {T0: offset(11, "x" * 500), T1: offset(12)}, 8)
    log = replicas.log_for("z", c.manager)
    assert log.data[21 + 1] & 0x07 == 4  # the batch's codec bits: zstd
    restarted = await make_coordinator(zstd)
    _, fetched = restarted.fetch_offsets("z", None)
    assert {tp: o.committed_offset for tp, o in fetched.items() if o} == {T0: 11, T1: 12}
