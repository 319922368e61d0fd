"""KIP-858 in the controller, from metadata.version 3.7-IV2: brokers say which log
directory holds each replica (AssignReplicasToDirs, Kafka's
ReplicationControlManager.handleAssignReplicasToDirs) and report failed directories in
their heartbeats (BrokerHeartbeat v1's OfflineLogDirs); the replicas there leave their
ISRs and leaderships, another ISR member leads, and the directories left online are
written in a BrokerRegistrationChangeRecord v2 (handleDirectoriesOffline); a replica in
an offline directory is no acceptable leader (Kafka's LeaderAcceptor)."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

import pytest
from control_manager_support import ManagersContext, registration

from tiercel.protocol.errors import (
    KafkaError,
    NotLeaderOrFollowerError,
    PreferredLeaderNotAvailableError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from tiercel.protocol.metadata.broker_records import BrokerRegistrationChangeRecord
from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.metadata_version import FEATURE_NAME, MetadataVersion
from tiercel.protocol.metadata.topic_records import (
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)
from tiercel.server.controller.control_managers import ControlManagers
from tiercel.server.controller.controller_exceptions import (
    InvalidRegistrationError,
    StaleBrokerEpochError,
)
from tiercel.server.controller.controller_requests import (
    AlterPartitionData,
    BrokerHeartbeatRequest,
    DirectoryAssignment,
    ElectionType,
)
from tiercel.server.metadata.image.partition_registration import (
    MIGRATING_DIRECTORY,
    UNASSIGNED_DIRECTORY,
)


def dirs(broker_id: int) -> tuple[uuid.UUID, uuid.UUID]:
    return uuid.UUID(int=(broker_id << 64) + 1000), uuid.UUID(int=(broker_id << 64) + 2000)


class Cluster(ManagersContext):
    """Brokers 1-3 with two directories each, registered and unfenced."""

    def __init__(self) -> None:
        super().__init__()
        for broker_id in (1, 2, 3):
            request = replace(registration(broker_id), log_dirs=dirs(broker_id))
            finalized = self.state.feature.finalized_features(self.offset)
            self.run(self.state.cluster.register_broker(request, self.offset, finalized))
            assert not self.heartbeat(broker_id).is_fenced

    def place(self, topic_id: uuid.UUID, partition_id: int, directory_index: int) -> None:
        """Every replica of the partition into its broker's first or second directory,
        as each broker's AssignReplicasToDirs says."""
        for broker_id in self.partition(topic_id, partition_id).replicas:
            assert assign(
                self, broker_id, dirs(broker_id)[directory_index], topic_id, partition_id
            ) == [None]


def assign(
    ctx: ManagersContext, broker_id: int, directory: uuid.UUID, topic_id: uuid.UUID, *ids: int
) -> list[KafkaError | None]:
    """AssignReplicasToDirs of one directory and topic; its records replayed."""
    registered = ctx.state.cluster.registration(broker_id)
    assert registered is not None
    request = [DirectoryAssignment(directory, ((topic_id, ids),))]
    [(_, [(_, results)])] = ctx.run(
        ctx.state.partitions.assign_replicas_to_dirs(broker_id, registered.epoch, request)
    )
    return [error for _, error in results]


def report_offline(
    ctx: ManagersContext, broker_id: int, *offline: uuid.UUID
) -> list[ApiMessageAndVersion]:
    """A heartbeat of ``broker_id`` naming ``offline`` directories, its records replayed."""
    registered = ctx.state.cluster.registration(broker_id)
    assert registered is not None
    request = BrokerHeartbeatRequest(
        broker_id, registered.epoch, ctx.offset, offline_log_dirs=offline
    )
    offset = ctx.state.cluster.register_broker_record_offset(broker_id)
    result = ctx.state.replication.process_broker_heartbeat(request, offset)
    ctx.replay(result.records)
    return list(result.records)


def test_a_failed_directory_moves_its_replicas_out_of_isrs_and_leaderships() -> None:
    ctx = Cluster()
    topic = ctx.create_topic("t", partitions=3, factor=3)
    for p in range(3):
        ctx.place(topic, p, directory_index=0 if p < 2 else 1)
    led_by_1 = next(p for p in range(3) if ctx.partition(topic, p).leader == 1)
    before = {p: ctx.partition(topic, p) for p in range(3)}
    failed, kept = dirs(1)
    records = report_offline(ctx, 1, failed)
    for p in range(3):
        partition = ctx.partition(topic, p)
        if p < 2:  # in the failed directory: out of the ISR, and led by another member
            assert 1 not in partition.isr and partition.leader in partition.isr
            assert partition.leader != 1
            assert partition.partition_epoch == before[p].partition_epoch + 1
        else:  # in the other directory: untouched
            assert partition == before[p]
    moved = ctx.partition(topic, led_by_1)
    assert moved.leader_epoch == before[led_by_1].leader_epoch + 1
    # The partition changes first, then the directories left online, at v2.
    last = records[-1]
    assert last.version == 2
    assert last.message == BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=ctx.state.cluster.registration(1).epoch, log_dirs=(kept,)
    )
    assert all(isinstance(r.message, PartitionChangeRecord) for r in records[:-1])
    registered = ctx.state.cluster.registration(1)
    assert registered is not None and registered.log_dirs == (kept,)
    assert not registered.fenced


def test_a_directory_reported_again_or_unknown_changes_nothing() -> None:
    ctx = Cluster()
    topic = ctx.create_topic("t", partitions=1, factor=2)
    ctx.place(topic, 0, 0)
    assert report_offline(ctx, 1, dirs(1)[0])
    assert report_offline(ctx, 1, dirs(1)[0]) == []
    assert report_offline(ctx, 1, uuid.UUID(int=12345 << 64)) == []


def test_a_replica_in_an_offline_directory_cannot_lead() -> None:
    ctx = Cluster()
    topic = ctx.create_topic("t", partitions=1, factor=2)
    ctx.place(topic, 0, 0)
    preferred = ctx.partition(topic).replicas[0]
    other = ctx.partition(topic).replicas[1]
    report_offline(ctx, preferred, dirs(preferred)[0])
    assert ctx.partition(topic).leader == other
    # Its leader takes it back into the ISR (Kafka does not check directories there) ...
    partition = ctx.partition(topic)
    registered = ctx.state.cluster.registration(other)
    assert registered is not None
    alter = AlterPartitionData(
        0, partition.leader_epoch, ((other, -1), (preferred, -1)), partition.partition_epoch
    )
    ctx.run(
        ctx.state.partitions.alter_partition(other, registered.epoch, [(topic, "t", [alter])], 3)
    )
    assert set(ctx.partition(topic).isr) == {preferred, other}
    # ... but leadership never goes back to a replica whose directory failed.
    result = ctx.state.replication.elect_leaders(ElectionType.PREFERRED, {"t": [0]})
    assert isinstance(result.response[("t", 0)], PreferredLeaderNotAvailableError)
    assert result.records == []
    ctx.run(ctx.state.replication.maybe_balance_partition_leaders(10))
    assert ctx.partition(topic).leader == other


def test_a_broker_losing_its_last_directory_keeps_it_registered_as_kafka_does() -> None:
    # The record names no directory, which replays as no change: the broker halts.
    ctx = ManagersContext()
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", partitions=1, factor=2)
    only = registration(1).log_dirs
    records = report_offline(ctx, 1, *only)
    assert 1 not in ctx.partition(topic).isr and ctx.partition(topic).leader == 2
    assert records[-1].message.log_dirs == ()  # type: ignore[attr-defined]
    registered = ctx.state.cluster.registration(1)
    assert registered is not None and registered.log_dirs == only


def test_before_3_7_iv2_offline_directories_are_not_handled() -> None:
    ctx = ManagersContext()
    old = MetadataVersion.IBP_3_7_IV1
    ctx.replay([ApiMessageAndVersion(FeatureLevelRecord(name=FEATURE_NAME, feature_level=old), 0)])
    ctx.add_brokers(1, 2)
    topic = ctx.create_topic("t", partitions=1, factor=2)
    before = ctx.partition(topic)
    registered = ctx.state.cluster.registration(1)
    assert registered is not None and registered.log_dirs == ()
    assert report_offline(ctx, 1, *registration(1).log_dirs) == []
    assert ctx.partition(topic) == before


def test_the_directory_index_follows_replay_and_topic_deletion() -> None:
    ctx = Cluster()
    topic = ctx.create_topic("t", partitions=1, factor=3)
    ctx.place(topic, 0, 0)
    # Written back as records and replayed elsewhere, the state handles the failure alike.
    copy = ControlManagers(ctx.state.config, ctx.time, random.Random(0))
    for offset, record in enumerate(ctx.state.records()):
        copy.replay(record.message, offset)
    copy.cluster.activate()
    assert [r.message for r in copy.records()] == [r.message for r in ctx.state.records()]
    registered = ctx.state.cluster.registration(1)
    assert registered is not None
    request = BrokerHeartbeatRequest(1, registered.epoch, 10**6, offline_log_dirs=(dirs(1)[0],))
    offset = ctx.state.cluster.register_broker_record_offset(1)
    expected = ctx.state.replication.process_broker_heartbeat(request, offset).records
    replayed = copy.replication.process_broker_heartbeat(request, offset).records
    assert replayed == expected and len(expected) == 2
    ctx.run(ctx.state.topics.delete_topics([topic]))
    assert report_offline(ctx, 1, dirs(1)[0])[-1].message.log_dirs == (dirs(1)[1],)  # type: ignore[attr-defined]


def test_new_replicas_get_kafkas_default_directories() -> None:
    ctx = Cluster()
    ctx.add_brokers(4)  # one directory
    assert ctx.state.replication.default_dir(1) == UNASSIGNED_DIRECTORY
    assert ctx.state.replication.default_dir(4) == registration(4).log_dirs[0]
    assert ctx.state.replication.default_dir(9) == UNASSIGNED_DIRECTORY
    old = ManagersContext()
    old.replay([ApiMessageAndVersion(FeatureLevelRecord(name=FEATURE_NAME, feature_level=16), 0)])
    old.add_brokers(1)
    assert old.state.replication.default_dir(1) == MIGRATING_DIRECTORY


def test_a_registration_naming_a_reserved_directory_is_refused() -> None:
    ctx = ManagersContext()
    finalized = ctx.state.feature.finalized_features(ctx.offset)
    for reserved in (UNASSIGNED_DIRECTORY, uuid.UUID(int=99)):
        request = replace(registration(1), log_dirs=(reserved,))
        with pytest.raises(InvalidRegistrationError, match="Reserved directory ID"):
            ctx.state.cluster.register_broker(request, 0, finalized)


def test_partition_records_without_directories_are_migrating() -> None:
    ctx = Cluster()
    topic_id = uuid.UUID(int=77 << 64)
    ctx.replay(
        [
            ApiMessageAndVersion(TopicRecord(name="old", topic_id=topic_id), 0),
            ApiMessageAndVersion(
                PartitionRecord(
                    partition_id=0, topic_id=topic_id, replicas=(1, 2), isr=(1, 2), leader=1
                ),
                0,
            ),
        ]
    )
    assert ctx.partition(topic_id).directory(1) == MIGRATING_DIRECTORY
    report_offline(ctx, 1, dirs(1)[0])
    assert ctx.partition(topic_id).leader == 1  # its directory is unknown: assumed online


def test_replicas_are_assigned_to_directories_by_their_brokers() -> None:
    ctx = Cluster()
    topic = ctx.create_topic("t", partitions=2, factor=2)
    replicas = ctx.partition(topic).replicas
    outsider = ({1, 2, 3} - set(replicas)).pop()
    assert ctx.partition(topic).directories == (UNASSIGNED_DIRECTORY,) * 2
    before = ctx.partition(topic)
    assert assign(ctx, replicas[1], dirs(replicas[1])[1], topic, 0) == [None]
    after = ctx.partition(topic)
    assert after.directories == (UNASSIGNED_DIRECTORY, dirs(replicas[1])[1])
    assert (after.isr, after.leader, after.leader_epoch) == (
        before.isr,
        before.leader,
        before.leader_epoch,
    )
    offset = ctx.offset
    assert assign(ctx, replicas[1], dirs(replicas[1])[1], topic, 0) == [None]
    assert ctx.offset == offset  # the same directory again: no record
    errors = assign(ctx, outsider, dirs(outsider)[0], topic, 0, 7)
    assert [type(e) for e in errors] == [NotLeaderOrFollowerError, UnknownTopicOrPartitionError]
    assert isinstance(assign(ctx, 1, dirs(1)[0], uuid.UUID(int=5 << 64), 0)[0], UnknownTopicIdError)
    with pytest.raises(StaleBrokerEpochError):
        ctx.state.partitions.assign_replicas_to_dirs(1, 10**9, [])


def test_a_replica_assigned_to_an_offline_directory_leaves_isr_and_leadership() -> None:
    # A broker may place a replica after its directory failed (Kafka's
    # handleAssignReplicasToDirs then moves it as handleDirectoriesOffline would have).
    ctx = Cluster()
    topic = ctx.create_topic("t", partitions=1, factor=3)
    leader = ctx.partition(topic).leader
    report_offline(ctx, leader, dirs(leader)[0])
    assert leader in ctx.partition(topic).isr  # its replica was in no known directory
    assert assign(ctx, leader, dirs(leader)[0], topic, 0) == [None]
    partition = ctx.partition(topic)
    assert leader not in partition.isr and partition.leader not in (leader, -1)
    assert partition.directory(leader) == dirs(leader)[0]


def test_directory_assignment_needs_3_7_iv2() -> None:
    ctx = ManagersContext()
    ctx.replay([ApiMessageAndVersion(FeatureLevelRecord(name=FEATURE_NAME, feature_level=16), 0)])
    ctx.add_brokers(1)
    registered = ctx.state.cluster.registration(1)
    assert registered is not None
    with pytest.raises(UnsupportedVersionError, match="not supported yet"):
        ctx.state.partitions.assign_replicas_to_dirs(1, registered.epoch, [])


def test_failed_directories_wait_for_a_heartbeat_without_a_state_change() -> None:
    ctx = Cluster()
    topic = ctx.create_topic("t", partitions=1, factor=2)
    ctx.place(topic, 0, 0)
    broker = ctx.partition(topic).replicas[0]
    assert ctx.heartbeat(broker, want_fence=True).is_fenced
    report_offline(ctx, broker, dirs(broker)[0])  # unfences it, and only that
    registered = ctx.state.cluster.registration(broker)
    assert registered is not None and not registered.fenced
    assert registered.log_dirs == dirs(broker)
    report_offline(ctx, broker, dirs(broker)[0])
    registered = ctx.state.cluster.registration(broker)
    assert registered is not None and registered.log_dirs == (dirs(broker)[1],)
    partition = ctx.partition(topic)
    assert broker not in partition.isr and partition.leader in partition.isr


def test_a_replica_moved_between_directories_leads_only_from_an_online_one() -> None:
    # Found by the model: judged by its old directory, the replica moved into a failed
    # one was elected by the very change that moved it.
    ctx = Cluster()
    topic = ctx.create_topic("t", partitions=1, factor=1)
    broker = ctx.partition(topic).leader
    failed, kept = dirs(broker)
    assert assign(ctx, broker, failed, topic, 0) == [None]
    report_offline(ctx, broker, failed)
    assert (ctx.partition(topic).leader, ctx.partition(topic).isr) == (-1, (broker,))
    assert assign(ctx, broker, kept, topic, 0) == [None]
    assert ctx.partition(topic).leader == broker
    assert assign(ctx, broker, failed, topic, 0) == [None]
    partition = ctx.partition(topic)
    assert (partition.leader, partition.isr) == (-1, (broker,))
    assert partition.directory(broker) == failed
