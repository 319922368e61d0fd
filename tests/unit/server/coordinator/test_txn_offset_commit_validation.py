"""TxnOffsetCommit's membership checks, as Kafka 4's
OffsetMetadataManager.validateTransactionalOffsetCommit makes them, on an in-memory
__consumer_offsets: a KIP-848 consumer group member must give its current member epoch
(anything else is ILLEGAL_GENERATION, never STALE_MEMBER_EPOCH), unknown members are
UNKNOWN_MEMBER_ID, the old versions that name no member are taken; a classic group
checks generation and member but not its rebalance state; an unknown group with a
generation is ILLEGAL_GENERATION; the empty group id is INVALID_GROUP_ID. A refused
commit writes nothing; an accepted one becomes the group's offset when its transaction
commits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from consumer_support import Member, add_topic, group
from group_support import NOW, FakeReplicaManager, join_params

from tiercel.protocol.errors import ErrorCode
from tiercel.server.coordinator.group.group_coordinator import GroupCoordinator
from tiercel.server.coordinator.group.group_metadata import GroupMetadata, GroupState
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata
from tiercel.storage.topic_partition import TopicPartition

MakeCoordinator = Callable[..., Awaitable[GroupCoordinator]]
T0 = TopicPartition("t", 0)
PRODUCER_ID = 11


def offset(value: int) -> dict[TopicPartition, OffsetAndMetadata]:
    return {T0: OffsetAndMetadata(value, -1, "", NOW)}


async def txn_commit(
    c: GroupCoordinator,
    member_id: str,
    generation_id: int,
    value: int,
    group_id: str = "g",
    instance_id: str | None = None,
) -> ErrorCode:
    result = await c.commit_transactional_offsets(
        "txn-id", group_id, PRODUCER_ID, 0, member_id, instance_id, generation_id, offset(value)
    )
    assert set(result) == {T0}
    return result[T0]


def committed(c: GroupCoordinator, group_id: str = "g") -> int | None:
    error, offsets = c.fetch_offsets(group_id, [T0])
    assert error is ErrorCode.none
    found = offsets[T0]
    return None if found is None else found.committed_offset


def commit_transaction(c: GroupCoordinator, group_id: str = "g") -> None:
    """The producer's COMMIT marker reached the group's __consumer_offsets partition."""
    c.on_transaction_completed(PRODUCER_ID, [c.partition_for(group_id)], committed=True)


async def test_consumer_group_member_commits_with_its_current_epoch(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    add_topic(c, "t", 1)
    m = Member(c, "m")
    await m.join()
    assert m.epoch >= 1
    assert await txn_commit(c, "m", m.epoch, 5) is ErrorCode.none
    assert c.manager.txn_offsets.is_pending("g", T0)
    assert committed(c) is None  # pending until the transaction commits
    commit_transaction(c)
    assert committed(c) == 5
    # TxnOffsetCommit v0-2 name no member: taken even though the group has members.
    assert await txn_commit(c, "", -1, 6) is ErrorCode.none
    commit_transaction(c)
    assert committed(c) == 6


async def test_consumer_group_refusals_have_kafkas_error_codes(
    make_coordinator: MakeCoordinator, replicas: FakeReplicaManager
) -> None:
    c = await make_coordinator()
    add_topic(c, "t", 1)
    m = Member(c, "m")
    await m.join()
    log = replicas.log_for("g", c.manager)
    end = log.log_end_offset
    refusals = {
        "stale epoch": await txn_commit(c, "m", m.epoch - 1, 7),
        "future epoch": await txn_commit(c, "m", m.epoch + 1, 7),
        "member without epoch": await txn_commit(c, "m", -1, 7),
        "unknown member": await txn_commit(c, "x", m.epoch, 7),
        "instance without member": await txn_commit(c, "", -1, 7, instance_id="i"),
        "epoch without member": await txn_commit(c, "", m.epoch, 7),
    }
    assert refusals == {
        "stale epoch": ErrorCode.illegal_generation,
        "future epoch": ErrorCode.illegal_generation,
        "member without epoch": ErrorCode.illegal_generation,
        "unknown member": ErrorCode.unknown_member_id,
        "instance without member": ErrorCode.unknown_member_id,
        "epoch without member": ErrorCode.unknown_member_id,
    }
    assert log.log_end_offset == end  # nothing written
    assert not c.manager.txn_offsets.has_pending("g")
    # A member fenced by a newer epoch of its own (it rejoined) has lost its commits.
    old_epoch = m.epoch
    await m.leave()
    await m.join()
    assert m.epoch != old_epoch
    assert await txn_commit(c, "m", old_epoch, 7) is ErrorCode.illegal_generation
    assert await txn_commit(c, "m", m.epoch, 8) is ErrorCode.none


async def test_an_empty_consumer_group_takes_commits_without_an_epoch(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    add_topic(c, "t", 1)
    m = Member(c, "m")
    await m.join()
    epoch = m.epoch
    await m.leave()
    assert not group(c).members
    assert await txn_commit(c, "m", epoch, 3) is ErrorCode.unknown_member_id
    assert await txn_commit(c, "", -1, 3) is ErrorCode.none
    commit_transaction(c)
    assert committed(c) == 3
    assert isinstance(c.manager.groups["g"], type(group(c)))  # still the consumer group


async def test_classic_group_checks_member_and_generation_but_not_the_rebalance(
    make_coordinator: MakeCoordinator,
) -> None:
    c = await make_coordinator()
    joined = await c.join_group(join_params(instance_id="i"))
    member_id, generation = joined.member_id, joined.generation_id
    classic = c.manager.groups["g"]
    assert isinstance(classic, GroupMetadata) and classic.is_(GroupState.COMPLETING_REBALANCE)
    # OffsetCommit is refused while the group completes its rebalance; TxnOffsetCommit
    # is not (Kafka 4 does not enforce the group's state for transactional commits).
    plain = await c.commit_offsets("g", member_id, "i", generation, offset(1), 8)
    assert plain == {T0: ErrorCode.rebalance_in_progress}
    assert await txn_commit(c, member_id, generation, 1, instance_id="i") is ErrorCode.none
    assert await txn_commit(c, "", -1, 2) is ErrorCode.none  # v0-2: no member named
    refusals = [
        await txn_commit(c, member_id, generation - 1, 3),
        await txn_commit(c, member_id, -1, 3),
        await txn_commit(c, "x", generation, 3),
        await txn_commit(c, "x", generation, 3, instance_id="i"),
        await txn_commit(c, member_id, generation, 3, instance_id="other"),
    ]
    assert refusals == [
        ErrorCode.illegal_generation,
        ErrorCode.illegal_generation,
        ErrorCode.unknown_member_id,
        ErrorCode.fenced_instance_id,
        ErrorCode.unknown_member_id,
    ]


async def test_unknown_groups_and_group_ids(make_coordinator: MakeCoordinator) -> None:
    c = await make_coordinator()
    assert await txn_commit(c, "m", 3, 1, group_id="nobody") is ErrorCode.illegal_generation
    assert "nobody" not in c.manager.groups
    # A producer committing for a consumer without group management: a simple group.
    assert await txn_commit(c, "", -1, 1, group_id="simple") is ErrorCode.none
    simple = c.manager.groups["simple"]
    assert isinstance(simple, GroupMetadata) and simple.is_(GroupState.EMPTY)
    commit_transaction(c, "simple")
    assert committed(c, "simple") == 1
    assert await txn_commit(c, "", -1, 1, group_id="") is ErrorCode.invalid_group_id
