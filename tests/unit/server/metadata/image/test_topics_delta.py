"""TopicsDelta and TopicDelta: topics and partitions replayed on top of an image
(Kafka's TopicsDelta.replay and apply), and what a delta changes for one broker's
replicas (localChanges), which ReplicaManager consumes."""

from __future__ import annotations

import pytest
from metadata_image_records import (
    BAR_ID,
    DIR_A,
    DIR_B,
    DIR_C,
    FOO_ID,
    metadata_version,
    partition,
    replay,
    topic,
)

from tiercel.protocol.metadata.topic_records import (
    ClearElrRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
)
from tiercel.server.metadata.image.errors import MetadataReplayError
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition

FOO0 = TopicPartition("foo", 0)
FOO1 = TopicPartition("foo", 1)
FOO2 = TopicPartition("foo", 2)


def _base() -> MetadataImage:
    """foo: partition 0 led by 1 on (1, 2, 3), partition 1 led by 2 on (2, 3, 4)."""
    image, _ = replay(
        [
            metadata_version(),
            topic(),
            partition(0, replicas=(1, 2, 3), leader=1, directories=(DIR_A, DIR_B, DIR_C)),
            partition(1, replicas=(2, 3, 4), leader=2, directories=(DIR_A, DIR_B, DIR_C)),
        ]
    )
    return image


def test_a_created_topic_is_found_by_id_and_by_name() -> None:
    image = _base()
    foo = image.topics.get_topic("foo")
    assert foo is not None and foo is image.topics.get_topic(FOO_ID)
    assert sorted(foo.partitions) == [0, 1]
    p1 = image.topics.get_partition(FOO_ID, 1)
    assert p1 is not None and p1.leader == 2
    assert image.topics.get_partition(FOO_ID, 2) is None
    assert image.topics.get_partition(BAR_ID, 0) is None


def test_partition_changes_apply_to_a_new_image_and_leave_the_old_one() -> None:
    base = _base()
    image, _ = replay(
        [
            PartitionChangeRecord(partition_id=0, topic_id=FOO_ID, isr=(1, 2)),
            PartitionChangeRecord(partition_id=0, topic_id=FOO_ID, leader=2),
        ],
        base,
    )
    p0 = image.topics.get_partition(FOO_ID, 0)
    assert p0 is not None and (p0.isr, p0.leader, p0.leader_epoch, p0.partition_epoch) == (
        (1, 2),
        2,
        1,
        2,
    )
    old = base.topics.get_partition(FOO_ID, 0)
    assert old is not None and (old.isr, old.leader) == ((1, 2, 3), 1)
    # The unchanged partition is shared, not copied.
    assert image.topics.get_partition(FOO_ID, 1) is base.topics.get_partition(FOO_ID, 1)


def test_a_change_to_an_unknown_partition_or_topic_is_refused() -> None:
    with pytest.raises(MetadataReplayError, match="Unable to find partition"):
        replay([PartitionChangeRecord(partition_id=7, topic_id=FOO_ID, isr=(1,))], _base())
    with pytest.raises(MetadataReplayError, match=f"Unable to find topic with id {BAR_ID}"):
        replay([PartitionChangeRecord(partition_id=0, topic_id=BAR_ID, isr=(1,))], _base())
    with pytest.raises(MetadataReplayError, match=f"Unable to find topic with id {BAR_ID}"):
        replay([partition(0, BAR_ID)], _base())
    with pytest.raises(MetadataReplayError, match="Unable to delete topic"):
        replay([RemoveTopicRecord(topic_id=BAR_ID)], _base())


def test_a_removed_topic_leaves_both_maps() -> None:
    image, delta = replay([RemoveTopicRecord(topic_id=FOO_ID)], _base())
    assert image.topics.is_empty() and not image.topics.topics_by_name
    assert delta.topics_delta is not None and delta.topics_delta.topic_was_deleted("foo")


def test_a_topic_created_and_removed_in_one_delta_leaves_no_trace() -> None:
    base = _base()
    image, delta = replay(
        [topic("bar", BAR_ID), partition(0, BAR_ID), RemoveTopicRecord(topic_id=BAR_ID)], base
    )
    assert image.topics == base.topics
    assert delta.topics_delta is not None
    assert not delta.topics_delta.topic_was_deleted("bar")
    assert delta.topics_delta.local_changes(1).deletes == frozenset()


def test_a_topic_deleted_and_created_again_under_its_name_is_the_new_topic() -> None:
    image, delta = replay(
        [RemoveTopicRecord(topic_id=FOO_ID), topic("foo", BAR_ID), partition(0, BAR_ID, (5, 6), 5)],
        _base(),
    )
    foo = image.topics.get_topic("foo")
    assert foo is not None and foo.id == BAR_ID and list(foo.partitions) == [0]
    assert image.topics.get_topic(FOO_ID) is None
    assert delta.topics_delta is not None and delta.topics_delta.topic_was_deleted("foo")
    # Broker 1 hosted both old partitions; broker 5 leads the new one.
    assert delta.topics_delta.local_changes(1).deletes == {FOO0}
    assert list(delta.topics_delta.local_changes(5).elected_leaders) == [FOO0]


def test_clear_elr_empties_one_topics_or_every_topics_elr() -> None:
    elr = PartitionRecord(
        partition_id=0,
        topic_id=BAR_ID,
        replicas=(1, 2),
        isr=(1,),
        leader=1,
        partition_epoch=4,
        eligible_leader_replicas=(2,),
        last_known_elr=(3,),
    )
    base, _ = replay([topic("bar", BAR_ID), elr], _base())
    for record in (ClearElrRecord(topic_name="bar"), ClearElrRecord(topic_name="")):
        image, _ = replay([record], base)
        p = image.topics.get_partition(BAR_ID, 0)
        assert p is not None and (p.elr, p.last_known_elr, p.partition_epoch) == ((), (), 5)
        # Partitions without ELR are left alone (their epoch does not move).
        assert image.topics.get_partition(FOO_ID, 0) is base.topics.get_partition(FOO_ID, 0)
    with pytest.raises(MetadataReplayError, match="no such topic found"):
        replay([ClearElrRecord(topic_name="baz")], base)
    with pytest.raises(MetadataReplayError, match="no such topic found"):
        replay([RemoveTopicRecord(topic_id=BAR_ID), ClearElrRecord(topic_name="bar")], base)
    # Clearing every topic's skips one deleted in the same delta instead of reviving it.
    image, _ = replay([RemoveTopicRecord(topic_id=BAR_ID), ClearElrRecord(topic_name="")], base)
    assert image.topics.get_topic("bar") is None


def test_local_changes_of_new_partitions() -> None:
    _, delta = replay(
        [topic(), partition(0, replicas=(1, 2), leader=1), partition(1, replicas=(2, 1), leader=2)]
    )
    assert delta.topics_delta is not None
    changes = delta.topics_delta.local_changes(1)
    assert set(changes.leaders) == set(changes.elected_leaders) == {FOO0}
    assert set(changes.followers) == {FOO1}
    assert changes.followers[FOO1].topic_id == FOO_ID
    assert changes.followers[FOO1].partition.leader == 2
    assert changes.deletes == frozenset()
    assert dict(changes.topic_ids) == {"foo": FOO_ID}
    # v0 records have no directories: MIGRATING, the broker finds the log where it is.
    assert set(changes.directory_ids) == {
        TopicIdPartition(FOO_ID, FOO0),
        TopicIdPartition(FOO_ID, FOO1),
    }
    # A broker with no replica in the delta has nothing to do.
    nothing = delta.topics_delta.local_changes(9)
    assert not (nothing.leaders or nothing.followers or nothing.deletes or nothing.topic_ids)
    assert not nothing.directory_ids


def test_local_changes_of_leadership_isr_and_replica_changes() -> None:
    _, delta = replay(
        [
            PartitionChangeRecord(partition_id=0, topic_id=FOO_ID, leader=2),
            PartitionChangeRecord(partition_id=1, topic_id=FOO_ID, isr=(2, 3)),
        ],
        _base(),
    )
    assert delta.topics_delta is not None
    # Broker 2 becomes leader of foo-0 (a new leader epoch) and stays leader of foo-1
    # whose ISR changed (partition epoch only).
    two = delta.topics_delta.local_changes(2)
    assert set(two.leaders) == {FOO0, FOO1}
    assert set(two.elected_leaders) == {FOO0}
    assert not two.followers
    # Broker 1 lost the leadership of foo-0: a follower now.
    one = delta.topics_delta.local_changes(1)
    assert set(one.followers) == {FOO0} and not one.leaders
    # No directory moved.
    assert not one.directory_ids and not two.directory_ids


def test_local_changes_of_a_reassignment() -> None:
    _, delta = replay(
        [
            PartitionChangeRecord(
                partition_id=0,
                topic_id=FOO_ID,
                replicas=(2, 3, 4),
                directories=(DIR_B, DIR_C, DIR_A),
                isr=(2, 3),
                leader=2,
            ),
        ],
        _base(),
    )
    assert delta.topics_delta is not None
    one = delta.topics_delta.local_changes(1)
    assert one.deletes == {FOO0} and not one.followers and not one.leaders
    four = delta.topics_delta.local_changes(4)
    assert set(four.followers) == {FOO0}
    # The new replica is told its directory; a replica that stays is told only when its
    # directory changed (broker 3's did not: DIR_C in both).
    assert dict(four.directory_ids) == {TopicIdPartition(FOO_ID, FOO0): DIR_A}
    assert not delta.topics_delta.local_changes(3).directory_ids


def test_local_changes_of_a_directory_move() -> None:
    _, delta = replay(
        [PartitionChangeRecord(partition_id=0, topic_id=FOO_ID, directories=(DIR_A, DIR_A, DIR_C))],
        _base(),
    )
    assert delta.topics_delta is not None
    two = delta.topics_delta.local_changes(2)
    assert dict(two.directory_ids) == {TopicIdPartition(FOO_ID, FOO0): DIR_A}
    assert set(two.followers) == {FOO0}  # the partition epoch moved with it


def test_local_changes_of_a_deleted_topic() -> None:
    _, delta = replay([RemoveTopicRecord(topic_id=FOO_ID)], _base())
    assert delta.topics_delta is not None
    assert delta.topics_delta.local_changes(1).deletes == {FOO0}
    assert delta.topics_delta.local_changes(3).deletes == {FOO0, FOO1}
    assert delta.topics_delta.local_changes(5).deletes == frozenset()


def test_an_unchanged_partition_epoch_is_no_local_change() -> None:
    # A snapshot repeating the image's partition exactly: nothing to do for any replica.
    base = _base()
    p0 = base.topics.get_partition(FOO_ID, 0)
    assert p0 is not None
    again = PartitionRecord(
        partition_id=0,
        topic_id=FOO_ID,
        replicas=p0.replicas,
        isr=p0.isr,
        leader=p0.leader,
        leader_epoch=p0.leader_epoch,
        partition_epoch=p0.partition_epoch,
        directories=p0.directories,
    )
    _, delta = replay([again], base)
    assert delta.topics_delta is not None
    changes = delta.topics_delta.local_changes(1)
    assert not (changes.leaders or changes.followers or changes.deletes or changes.directory_ids)


def test_clear_elr_of_a_topic_created_in_the_same_delta() -> None:
    elr = PartitionRecord(
        partition_id=0,
        topic_id=BAR_ID,
        replicas=(1, 2),
        isr=(1,),
        leader=1,
        eligible_leader_replicas=(2,),
    )
    image, _ = replay([topic("bar", BAR_ID), elr, ClearElrRecord(topic_name="bar")], _base())
    p = image.topics.get_partition(BAR_ID, 0)
    assert p is not None and p.elr == ()


def test_one_topics_delta_new_partitions_and_local_changes() -> None:
    # Kafka's TopicDelta.newPartitions (partitions added to an existing topic) and
    # TopicDelta.localChanges (one topic's share of TopicsDelta.localChanges).
    _, delta = replay(
        [
            partition(2, replicas=(3, 1), leader=3),
            PartitionChangeRecord(partition_id=0, topic_id=FOO_ID, isr=(1, 3)),
        ],
        _base(),
    )
    assert delta.topics_delta is not None
    foo = delta.topics_delta.changed_topics[FOO_ID]
    assert list(foo.new_partitions()) == [2]
    one = foo.local_changes(1)
    assert one == delta.topics_delta.local_changes(1)
    assert set(one.leaders) == {FOO0} and not one.elected_leaders
    assert set(one.followers) == {FOO2}
