"""PartitionRegistration: a PartitionRecord's state, a PartitionChangeRecord merged into
it as Kafka's PartitionRegistration.merge does, and the PartitionRecord written back at
each metadata.version (toRecord)."""

from __future__ import annotations

import pytest
from metadata_image_records import DIR_A, DIR_B, DIR_C, FOO_ID, partition

from tiercel.protocol.metadata.metadata_version import MetadataVersion
from tiercel.protocol.metadata.topic_records import PartitionChangeRecord, PartitionRecord
from tiercel.server.metadata.image.errors import MetadataReplayError, UnwritableMetadataError
from tiercel.server.metadata.image.image_writer import ImageWriterOptions
from tiercel.server.metadata.image.partition_registration import (
    MIGRATING_DIRECTORY,
    LeaderRecoveryState,
    PartitionRegistration,
)


def _change(**fields: object) -> PartitionChangeRecord:
    return PartitionChangeRecord(partition_id=0, topic_id=FOO_ID, **fields)  # type: ignore[arg-type]


def test_from_record_keeps_every_field() -> None:
    record = PartitionRecord(
        partition_id=0,
        topic_id=FOO_ID,
        replicas=(1, 2, 3),
        isr=(1, 2),
        removing_replicas=(3,),
        adding_replicas=(),
        leader=2,
        leader_recovery_state=1,
        leader_epoch=7,
        partition_epoch=9,
        directories=(DIR_A, DIR_B, DIR_C),
        eligible_leader_replicas=(3,),
        last_known_elr=(4,),
    )
    p = PartitionRegistration.from_record(record)
    assert p == PartitionRegistration(
        (1, 2, 3), (DIR_A, DIR_B, DIR_C), (1, 2), (3,), (), 2,
        LeaderRecoveryState.RECOVERING, 7, 9, (3,), (4,),
    )  # fmt: skip
    assert p.directory(2) == DIR_B
    assert p.has_leader()


def test_a_record_without_directories_has_migrating_for_every_replica() -> None:
    # PartitionRecord v0 (before 3.7-IV2) has none: Kafka's defaultToMigrating.
    p = PartitionRegistration.from_record(partition(replicas=(1, 2)))
    assert p.directories == (MIGRATING_DIRECTORY, MIGRATING_DIRECTORY)
    assert p.elr == () and p.last_known_elr == ()


def test_directories_not_one_per_replica_are_refused() -> None:
    with pytest.raises(MetadataReplayError, match=r"replicas \(3\) and directories \(2\)"):
        PartitionRegistration.from_record(partition(directories=(DIR_A, DIR_B)))


def test_an_unknown_leader_recovery_state_is_refused() -> None:
    with pytest.raises(MetadataReplayError, match="5 is not a valid leader recovery state"):
        PartitionRegistration.from_record(
            PartitionRecord(partition_id=0, topic_id=FOO_ID, leader_recovery_state=5)
        )


def test_an_isr_change_bumps_the_partition_epoch_only() -> None:
    p = PartitionRegistration.from_record(partition(leader_epoch=4, partition_epoch=6))
    merged = p.merge(_change(isr=(1, 2)))
    assert (merged.isr, merged.leader, merged.leader_epoch, merged.partition_epoch) == (
        (1, 2),
        1,
        4,
        7,
    )
    assert p.isr == (1, 2, 3)  # the registration merged into is a value


def test_a_leader_change_bumps_both_epochs() -> None:
    p = PartitionRegistration.from_record(partition(leader_epoch=4, partition_epoch=6))
    merged = p.merge(_change(leader=2))
    assert (merged.leader, merged.leader_epoch, merged.partition_epoch) == (2, 5, 7)
    # Naming the same leader again is still a new leader epoch, as in Kafka.
    assert p.merge(_change(leader=1)).leader_epoch == 5
    # So is losing the leader (-1).
    leaderless = p.merge(_change(leader=-1))
    assert not leaderless.has_leader() and leaderless.leader_epoch == 5


def test_a_reassignment_changes_replicas_with_their_directories() -> None:
    p = PartitionRegistration.from_record(partition(replicas=(1, 2), directories=(DIR_A, DIR_B)))
    moving = p.merge(
        _change(
            replicas=(1, 2, 3),
            adding_replicas=(3,),
            removing_replicas=(2,),
            directories=(DIR_A, DIR_B, DIR_C),
        )
    )
    assert moving.replicas == (1, 2, 3) and moving.directory(3) == DIR_C
    assert (moving.adding_replicas, moving.removing_replicas) == ((3,), (2,))
    with pytest.raises(MetadataReplayError, match="do not match"):
        p.merge(_change(replicas=(1, 2, 3)))  # the old directories, one short


def test_directories_alone_and_recovery_state_and_elr_change() -> None:
    p = PartitionRegistration.from_record(partition(replicas=(1, 2)))
    merged = p.merge(
        _change(
            directories=(DIR_B, DIR_A),
            leader_recovery_state=1,
            eligible_leader_replicas=(2,),
            last_known_elr=(),
        )
    )
    assert merged.directories == (DIR_B, DIR_A)
    assert merged.leader_recovery_state is LeaderRecoveryState.RECOVERING
    assert (merged.elr, merged.last_known_elr) == ((2,), ())
    # -1: the recovery state is unchanged.
    assert merged.merge(_change()).leader_recovery_state is LeaderRecoveryState.RECOVERING


def test_directory_of_a_non_replica_is_a_value_error() -> None:
    p = PartitionRegistration.from_record(partition())
    with pytest.raises(ValueError, match="Replica 9 is not assigned"):
        p.directory(9)


def _written(p: PartitionRegistration, version: MetadataVersion) -> tuple[PartitionRecord, int]:
    written = p.to_record(FOO_ID, 3, ImageWriterOptions(version))
    assert isinstance(written.message, PartitionRecord)
    return written.message, written.version


def test_to_record_writes_the_metadata_versions_partition_record() -> None:
    p = PartitionRegistration(
        (1, 2), (DIR_A, DIR_B), (1,), (), (2,), 1, LeaderRecoveryState.RECOVERED, 3, 4, (2,), ()
    )
    record, version = _written(p, MetadataVersion.IBP_4_0_IV3)
    assert version == 2
    assert (record.partition_id, record.topic_id, record.directories) == (3, FOO_ID, (DIR_A, DIR_B))
    # ELR fields are tagged: an empty one is not written at all.
    assert (record.eligible_leader_replicas, record.last_known_elr) == ((2,), None)
    assert PartitionRegistration.from_record(record) == p

    record, version = _written(p, MetadataVersion.IBP_3_7_IV2)
    assert version == 1 and record.eligible_leader_replicas is None
    assert record.directories == (DIR_A, DIR_B)


def test_directories_before_3_7_iv2_are_a_loss_unless_migrating() -> None:
    assigned = PartitionRegistration.from_record(partition(directories=(DIR_A, DIR_B, DIR_C)))
    with pytest.raises(UnwritableMetadataError, match="directory assignment state"):
        _written(assigned, MetadataVersion.IBP_3_7_IV1)
    migrating = PartitionRegistration.from_record(partition())
    record, version = _written(migrating, MetadataVersion.IBP_3_3_IV3)
    assert version == 0 and record.directories == ()
