"""The smaller parts of the metadata image, replayed as Kafka's deltas replay them:
features, configs, client quotas, producer ids, ACLs, SCRAM credentials, delegation
tokens; and what a metadata.version cannot write of them."""

from __future__ import annotations

import uuid

import pytest
from metadata_image_records import FOO_ID, metadata_version, partition, replay, topic

from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord, ProducerIdsRecord
from tiercel.protocol.metadata.config_records import ClientQuotaRecord, ConfigRecord, EntityData
from tiercel.protocol.metadata.metadata_version import MetadataVersion
from tiercel.protocol.metadata.security_records import (
    AccessControlEntryRecord,
    DelegationTokenRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from tiercel.protocol.metadata.topic_records import RemoveTopicRecord
from tiercel.server.metadata.image.acls import StandardAcl
from tiercel.server.metadata.image.client_quotas import ClientQuotaEntity
from tiercel.server.metadata.image.configurations import ConfigResource, ConfigResourceType
from tiercel.server.metadata.image.errors import MetadataReplayError, UnwritableMetadataError
from tiercel.server.metadata.image.image_writer import ImageWriterOptions, RecordListWriter
from tiercel.server.metadata.image.metadata_image import MetadataImage

TOPIC_FOO = ConfigResource(ConfigResourceType.TOPIC, "foo")
BROKER_DEFAULT = ConfigResource(ConfigResourceType.BROKER, "")


def _config(resource: ConfigResource, name: str, value: str | None) -> ConfigRecord:
    return ConfigRecord(
        resource_type=resource.type, resource_name=resource.name, name=name, value=value
    )


def test_metadata_version_and_other_features() -> None:
    image, delta = replay(
        [
            metadata_version(MetadataVersion.IBP_3_9_IV0),
            FeatureLevelRecord(name="kraft.version", feature_level=1),
        ]
    )
    assert image.features.metadata_version is MetadataVersion.IBP_3_9_IV0
    assert image.features.metadata_version_or_throw() is MetadataVersion.IBP_3_9_IV0
    assert delta.metadata_version_changed() is MetadataVersion.IBP_3_9_IV0
    assert dict(image.features.finalized_versions) == {"kraft.version": 1}
    # Level 0 turns a feature off; a later delta without a metadata.version keeps it.
    image, delta = replay([FeatureLevelRecord(name="kraft.version", feature_level=0)], image)
    assert dict(image.features.finalized_versions) == {}
    assert image.features.metadata_version is MetadataVersion.IBP_3_9_IV0
    assert delta.metadata_version_changed() is None


def test_a_metadata_version_kafka_4_does_not_know_is_refused() -> None:
    with pytest.raises(MetadataReplayError, match="No MetadataVersion with feature level 6"):
        replay([FeatureLevelRecord(name="metadata.version", feature_level=6)])
    with pytest.raises(MetadataReplayError, match=r"No metadata\.version is set"):
        MetadataImage.EMPTY.features.metadata_version_or_throw()


def test_configs_are_set_deleted_and_go_with_their_topic() -> None:
    image, _ = replay(
        [
            topic(),
            _config(TOPIC_FOO, "retention.ms", "1000"),
            _config(TOPIC_FOO, "cleanup.policy", "compact"),
            _config(BROKER_DEFAULT, "log.retention.ms", "5"),
        ]
    )
    assert dict(image.configs.config_map_for_resource(TOPIC_FOO)) == {
        "retention.ms": "1000",
        "cleanup.policy": "compact",
    }
    image, _ = replay([_config(TOPIC_FOO, "retention.ms", None)], image)
    assert dict(image.configs.config_map_for_resource(TOPIC_FOO)) == {"cleanup.policy": "compact"}
    # The last config of a resource deleted: the resource is gone.
    image2, _ = replay([_config(BROKER_DEFAULT, "log.retention.ms", None)], image)
    assert BROKER_DEFAULT not in image2.configs.resource_data
    # Deleting the topic deletes its configs, those set in the same delta too.
    image3, _ = replay(
        [_config(TOPIC_FOO, "segment.ms", "9"), RemoveTopicRecord(topic_id=FOO_ID)], image
    )
    assert TOPIC_FOO not in image3.configs.resource_data
    assert BROKER_DEFAULT in image3.configs.resource_data
    # A resource type Kafka does not know is UNKNOWN, as ConfigResource.Type.forId says.
    image4, _ = replay([ConfigRecord(resource_type=99, resource_name="x", name="a", value="b")])
    assert list(image4.configs.resource_data) == [ConfigResource(ConfigResourceType.UNKNOWN, "x")]


def test_a_topic_created_configured_and_deleted_in_one_delta_leaves_no_configs() -> None:
    image, _ = replay(
        [
            topic(),
            partition(),
            _config(TOPIC_FOO, "retention.ms", "1"),
            RemoveTopicRecord(topic_id=FOO_ID),
        ]
    )
    assert image.configs.is_empty() and image.topics.is_empty()


def _quota(
    key: str, value: float, *, remove: bool = False, user: str | None = "alice"
) -> ClientQuotaRecord:
    entity = (
        EntityData(entity_type="user", entity_name=user),
        EntityData(entity_type="client-id", entity_name=None),
    )
    return ClientQuotaRecord(entity=entity, key=key, value=value, remove=remove)


def test_client_quotas_per_entity() -> None:
    image, _ = replay([_quota("producer_byte_rate", 1024.0), _quota("consumer_byte_rate", 2048.0)])
    entity = ClientQuotaEntity((("client-id", None), ("user", "alice")))
    assert ClientQuotaEntity.of(_quota("k", 1.0).entity) == entity
    assert dict(image.client_quotas.entities[entity].quotas) == {
        "producer_byte_rate": 1024.0,
        "consumer_byte_rate": 2048.0,
    }
    image, _ = replay([_quota("producer_byte_rate", 0.0, remove=True)], image)
    assert dict(image.client_quotas.entities[entity].quotas) == {"consumer_byte_rate": 2048.0}
    image, _ = replay([_quota("consumer_byte_rate", 0.0, remove=True)], image)
    assert image.client_quotas.is_empty()


def test_producer_ids() -> None:
    assert MetadataImage.EMPTY.producer_ids.next_producer_id == -1
    image, _ = replay([ProducerIdsRecord(broker_id=1, broker_epoch=10, next_producer_id=1000)])
    image, _ = replay(
        [ProducerIdsRecord(broker_id=2, broker_epoch=20, next_producer_id=2000)], image
    )
    assert image.producer_ids.next_producer_id == 2000 and not image.producer_ids.is_empty()


def _acl(acl_id: uuid.UUID, principal: str = "User:alice") -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=acl_id,
        resource_type=2,
        resource_name="foo",
        pattern_type=3,
        principal=principal,
        host="*",
        operation=3,
        permission_type=3,
    )


def test_acls_by_id() -> None:
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    image, _ = replay([_acl(a), _acl(b, "User:bob")])
    assert image.acls.acls[b] == StandardAcl(2, "foo", 3, "User:bob", "*", 3, 3)
    image, _ = replay([RemoveAccessControlEntryRecord(id=a)], image)
    assert list(image.acls.acls) == [b]
    # Added and removed in one delta: nothing.
    c = uuid.UUID(int=3)
    image2, delta = replay([_acl(c), RemoveAccessControlEntryRecord(id=c)], image)
    assert (
        image2.acls == image.acls and delta.acls_delta is not None and not delta.acls_delta.changes
    )
    with pytest.raises(MetadataReplayError, match=f"Failed to find existing ACL with ID {a}"):
        replay([RemoveAccessControlEntryRecord(id=a)], image)


def _scram(name: str, mechanism: int) -> UserScramCredentialRecord:
    return UserScramCredentialRecord(
        name=name,
        mechanism=mechanism,
        salt=b"salt",
        stored_key=b"sk",
        server_key=b"vk",
        iterations=4096,
    )


def test_scram_credentials_per_mechanism_and_user() -> None:
    image, _ = replay([_scram("alice", 1), _scram("alice", 2), _scram("bob", 1)])
    assert sorted(image.scram.mechanisms) == [1, 2]
    assert image.scram.mechanisms[1]["bob"].iterations == 4096
    assert "sk" not in repr(image.scram.mechanisms[1]["bob"])  # secrets stay out of logs
    image, _ = replay([RemoveUserScramCredentialRecord(name="alice", mechanism=2)], image)
    assert sorted(image.scram.mechanisms) == [1]  # a mechanism without users is absent
    assert sorted(image.scram.mechanisms[1]) == ["alice", "bob"]


def _token(token_id: str, expiration: int) -> DelegationTokenRecord:
    return DelegationTokenRecord(
        owner="User:alice",
        requester="User:alice",
        renewers=("User:bob",),
        issue_timestamp=1,
        max_timestamp=100,
        expiration_timestamp=expiration,
        token_id=token_id,
    )


def test_delegation_tokens() -> None:
    image, _ = replay([_token("t1", 10), _token("t2", 20), _token("t1", 30)])
    assert image.delegation_tokens.tokens["t1"].expiration_timestamp == 30
    assert "alice" not in repr(image.delegation_tokens.tokens["t1"])
    image, _ = replay([RemoveDelegationTokenRecord(token_id="t1")], image)
    assert list(image.delegation_tokens.tokens) == ["t2"]


@pytest.mark.parametrize(
    "record, version, loss",
    [
        (_scram("alice", 1), MetadataVersion.IBP_3_5_IV1, "SCRAM credentials of alice"),
        (_token("t1", 10), MetadataVersion.IBP_3_6_IV1, r"DelegationTokenImage\(t1\)"),
    ],
)
def test_security_state_a_metadata_version_has_no_record_for_is_a_loss(
    record: object, version: MetadataVersion, loss: str
) -> None:
    image, _ = replay([record])  # type: ignore[list-item]
    with pytest.raises(UnwritableMetadataError, match=f"metadata.version {version}: {loss}"):
        image.write(RecordListWriter(), ImageWriterOptions(version))
    # One version later it is written.
    writer = RecordListWriter()
    image.write(writer, ImageWriterOptions(MetadataVersion(version + 1)))
    assert [r.message for r in writer.records][1:] == [record]
