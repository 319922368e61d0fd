"""MetadataDelta: each record to the part of the image it changes (Kafka's
MetadataDelta.replay), untouched parts shared, snapshot loads that remove what the
snapshot does not hold (finishSnapshot), and the provenance of the image applied."""

from __future__ import annotations

import uuid

import pytest
from metadata_image_records import (
    FOO_ID,
    metadata_version,
    partition,
    register_broker,
    replay,
    topic,
)

from tiercel.protocol.metadata.cluster_records import (
    FeatureLevelRecord,
    ProducerIdsRecord,
    ZkMigrationStateRecord,
)
from tiercel.protocol.metadata.config_records import ClientQuotaRecord, ConfigRecord, EntityData
from tiercel.protocol.metadata.log_control_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    NoOpRecord,
)
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_record_type import METADATA_RECORD_TYPES
from tiercel.protocol.metadata.metadata_version import MetadataVersion
from tiercel.protocol.metadata.security_records import (
    AccessControlEntryRecord,
    DelegationTokenRecord,
    UserScramCredentialRecord,
)
from tiercel.server.metadata.image.errors import MetadataReplayError
from tiercel.server.metadata.image.metadata_delta import MetadataDelta
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.server.metadata.image.metadata_provenance import MetadataProvenance
from tiercel.storage.topic_partition import TopicPartition


def _everything() -> list[MetadataRecord]:
    return [
        metadata_version(MetadataVersion.IBP_4_0_IV3),
        FeatureLevelRecord(name="kraft.version", feature_level=1),
        register_broker(1, 10),
        topic(),
        partition(0, replicas=(1, 2)),
        ConfigRecord(resource_type=2, resource_name="foo", name="retention.ms", value="1"),
        ClientQuotaRecord(
            entity=(EntityData(entity_type="user", entity_name="alice"),),
            key="producer_byte_rate",
            value=1.0,
        ),
        ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=1000),
        AccessControlEntryRecord(id=uuid.UUID(int=1), principal="User:alice", host="*"),
        UserScramCredentialRecord(name="alice", mechanism=1, iterations=4096),
        DelegationTokenRecord(token_id="t1", owner="User:alice"),
    ]


def test_every_part_of_the_image_is_replayed() -> None:
    image, delta = replay(_everything())
    assert image.features.metadata_version is MetadataVersion.IBP_4_0_IV3
    assert list(image.cluster.brokers) == [1]
    assert image.topics.get_topic("foo") is not None
    assert len(image.configs.resource_data) == 1
    assert len(image.client_quotas.entities) == 1
    assert image.producer_ids.next_producer_id == 1000
    assert len(image.acls.acls) == 1
    assert list(image.scram.mechanisms) == [1]
    assert list(image.delegation_tokens.tokens) == ["t1"]
    assert not image.is_empty() and MetadataImage.EMPTY.is_empty()
    assert delta.metadata_version_changed() is MetadataVersion.IBP_4_0_IV3


def test_parts_no_record_touched_are_shared_and_the_provenance_is_the_new_one() -> None:
    base, _ = replay(_everything())
    delta = MetadataDelta(base)
    delta.replay(ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=2000))
    provenance = MetadataProvenance(41, 3, 1_700_000_000_000, True)
    image = delta.apply(provenance)
    assert image.provenance is provenance and image.offset == 41
    assert image.producer_ids.next_producer_id == 2000
    for part in ("features", "cluster", "topics", "configs", "client_quotas", "acls", "scram"):
        assert getattr(image, part) is getattr(base, part)
    assert delta.topics_delta is None and delta.cluster_delta is None
    assert base.producer_ids.next_producer_id == 1000


def test_no_op_and_zk_migration_state_records_change_nothing() -> None:
    base, _ = replay(_everything())
    image, delta = replay(
        [NoOpRecord(), ZkMigrationStateRecord(zk_migration_state=0)], base, offset=9
    )
    assert image == MetadataImage(image.provenance, *(getattr(base, part) for part in _PARTS))
    assert image.offset == 9 and delta.features_delta is None


_PARTS = (
    "features",
    "cluster",
    "topics",
    "configs",
    "client_quotas",
    "producer_ids",
    "acls",
    "scram",
    "delegation_tokens",
)


@pytest.mark.parametrize(
    "record", [BeginTransactionRecord(name="x"), EndTransactionRecord(), AbortTransactionRecord()]
)
def test_transaction_markers_are_for_the_log_reader_not_the_delta(record: MetadataRecord) -> None:
    # Kafka's MetadataBatchLoader applies a metadata transaction's records once it ends;
    # MetadataDelta.replay knows no such record type.
    with pytest.raises(MetadataReplayError, match=type(record).__name__):
        MetadataDelta(MetadataImage.EMPTY).replay(record)


def test_a_snapshot_removes_everything_it_does_not_hold() -> None:
    base, _ = replay(_everything())
    snapshot = [metadata_version(MetadataVersion.IBP_4_0_IV3), register_broker(2, 20)]
    image, delta = replay(snapshot, base, snapshot=True)
    assert list(image.cluster.brokers) == [2]
    assert image.features.metadata_version is MetadataVersion.IBP_4_0_IV3
    for part in ("topics", "configs", "client_quotas", "acls", "scram", "delegation_tokens"):
        assert getattr(image, part).is_empty(), part
    assert not image.features.finalized_versions
    # What ReplicaManager is told: broker 1 no longer hosts foo-0.
    assert delta.topics_delta is not None
    assert delta.topics_delta.local_changes(1).deletes == {TopicPartition("foo", 0)}


def test_a_snapshot_of_the_same_state_gives_the_same_image_and_restates_every_replica() -> None:
    base, _ = replay(_everything())
    image, delta = replay(_everything(), base, snapshot=True)
    assert image == base
    # A snapshot's TopicRecord starts its topic afresh, so every partition of it is new
    # to the delta and each replica is told its state again, as Kafka's
    # TopicsDelta.replay(TopicRecord) and localChanges do after a snapshot load;
    # ReplicaManager finds the same leader epoch and keeps its replicas as they are.
    assert delta.topics_delta is not None
    foo0 = TopicPartition("foo", 0)
    one, two = delta.topics_delta.local_changes(1), delta.topics_delta.local_changes(2)
    assert set(one.leaders) == set(one.elected_leaders) == {foo0} and not one.deletes
    assert set(two.followers) == {foo0} and not two.deletes


def test_a_snapshot_keeps_the_producer_id_block_it_does_not_name() -> None:
    # Kafka's ProducerIdsDelta.finishSnapshot does nothing: a snapshot holds the block
    # once one was handed out, and the next producer id never goes back.
    base, _ = replay(_everything())
    image, _ = replay([metadata_version()], base, snapshot=True)
    assert image.producer_ids.next_producer_id == 1000


def test_a_change_to_a_topic_absent_from_a_snapshot_is_refused_after_it() -> None:
    base, _ = replay(_everything())
    image, _ = replay([metadata_version()], base, snapshot=True)
    with pytest.raises(MetadataReplayError, match=f"Unable to find topic with id {FOO_ID}"):
        replay([partition(1)], image)


def test_every_record_type_has_a_replayer() -> None:
    # Kafka's MetadataDelta.replay switches over every MetadataRecordType; a type without
    # a case is "Unknown metadata record type". Each record at its defaults either
    # applies or fails for its content, never for its type.
    for cls in METADATA_RECORD_TYPES.values():
        try:
            MetadataDelta(MetadataImage.EMPTY).replay(cls())
        except MetadataReplayError as e:
            assert "Unknown metadata record type" not in str(e), cls.__name__


def test_a_record_type_without_a_replayer_is_refused() -> None:
    class FutureRecord(NoOpRecord):
        pass

    with pytest.raises(MetadataReplayError, match="Unknown metadata record type FutureRecord"):
        MetadataDelta(MetadataImage.EMPTY).replay(FutureRecord())
