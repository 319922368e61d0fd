"""PartitionChangeBuilder: clean, preferred and unclean elections, the ISR that never
empties, leader epoch bumps, completed reassignments, and no record when nothing
changes."""

from __future__ import annotations

import uuid

from tiercel.protocol.metadata.metadata_version import MetadataVersion
from tiercel.protocol.metadata.topic_records import PartitionChangeRecord
from tiercel.server.controller.partition_change_builder import Election, PartitionChangeBuilder
from tiercel.server.metadata.image.partition_registration import PartitionRegistration

TOPIC = uuid.UUID(int=5)
DIR = uuid.UUID(int=9)


def partition(
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    leader: int,
    adding: tuple[int, ...] = (),
    removing: tuple[int, ...] = (),
) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=replicas,
        directories=tuple(DIR for _ in replicas),
        isr=isr,
        removing_replicas=removing,
        adding_replicas=adding,
        leader=leader,
        leader_recovery_state=0,
        leader_epoch=3,
        partition_epoch=7,
    )


def builder(
    part: PartitionRegistration,
    active: set[int],
    version: MetadataVersion = MetadataVersion.IBP_4_0_IV3,
) -> PartitionChangeBuilder:
    return PartitionChangeBuilder(part, TOPIC, 0, active.__contains__, version, lambda b: DIR)


def change(b: PartitionChangeBuilder) -> PartitionChangeRecord | None:
    record = b.build()
    if record is None:
        return None
    assert isinstance(record.message, PartitionChangeRecord)
    return record.message


def test_nothing_to_change_builds_nothing() -> None:
    assert change(builder(partition((1, 2), (1, 2), 1), {1, 2})) is None


def test_a_leader_that_may_no_longer_lead_is_replaced_from_the_isr() -> None:
    record = change(builder(partition((1, 2, 3), (1, 2, 3), 1), {2, 3}).set_target_isr([2, 3]))
    assert record is not None
    assert record.leader == 2 and record.isr == (2, 3)
    merged = partition((1, 2, 3), (1, 2, 3), 1).merge(record)
    assert merged.leader_epoch == 4 and merged.partition_epoch == 8


def test_the_last_isr_member_stays_in_the_isr_without_a_leader() -> None:
    record = change(builder(partition((1, 2), (1,), 1), {2}).set_target_isr([]))
    assert record is not None
    assert record.leader == -1 and record.isr is None


def test_unclean_election_picks_a_live_replica_and_marks_it_recovering() -> None:
    b = builder(partition((1, 2), (1,), 1), {2}).set_target_isr([])
    b.set_election(Election.UNCLEAN)
    record = change(b)
    assert record is not None
    assert record.leader == 2 and record.isr == (2,) and record.leader_recovery_state == 1


def test_preferred_election_moves_back_to_the_first_replica() -> None:
    part = partition((1, 2), (1, 2), 2)
    assert change(builder(part, {1, 2})) is None
    record = change(builder(part, {1, 2}).set_election(Election.PREFERRED))
    assert record is not None and record.leader == 1
    assert change(builder(part, {2}).set_election(Election.PREFERRED)) is None


def test_isr_shrink_bumps_the_leader_epoch_only_before_3_6() -> None:
    part = partition((1, 2, 3), (1, 2, 3), 1)
    new = change(builder(part, {1, 2, 3}).set_target_isr([1, 2]))
    assert new is not None and new.leader == -2 and new.isr == (1, 2)
    old = change(builder(part, {1, 2, 3}, MetadataVersion.IBP_3_5_IV2).set_target_isr([1, 2]))
    assert old is not None and old.leader == 1


def test_a_reassignment_completes_once_the_adding_replicas_are_in_the_isr() -> None:
    part = partition((3, 1, 2), (1, 2), 1, adding=(3,), removing=(1,))
    assert change(builder(part, {1, 2, 3}).set_target_isr([1, 2])) is None
    record = change(builder(part, {1, 2, 3}).set_target_isr([1, 2, 3]))
    assert record is not None
    assert record.replicas == (3, 2) and record.isr == (2, 3)
    assert record.adding_replicas == () and record.removing_replicas == ()
    assert record.leader == 3  # the removed leader hands over, to the first new replica
    assert record.directories == (DIR, DIR)
