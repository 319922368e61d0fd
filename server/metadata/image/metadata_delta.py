"""A change to the metadata image: records replayed on top of an image, applied into the
next one (Kafka's MetadataDelta).

The log is replayed record by record: ``replay`` hands each record to the delta of the
part of the image it changes (created on first use, so an image part no record touched
is carried over as it was). A snapshot is loaded the same way, from the image the node
had, and ``finish_snapshot`` then removes whatever the snapshot did not contain. What
the delta changed stays readable after ``apply`` (``topics_delta.local_changes(...)``
is what ReplicaManager consumes).

Records of metadata transactions (Begin/End/AbortTransactionRecord, KIP-868) are not
for a delta: whoever reads the log applies a transaction's records only once it ends
(Kafka's MetadataBatchLoader), so replaying one here is an error, as in Kafka.
NoOpRecord changes nothing; ZkMigrationStateRecord, which Kafka 3.4 to 3.9 wrote into
snapshots, has nothing to change in a cluster that never ran ZooKeeper.

Not thread-safe: one replayer builds a delta; the images it starts from and produces
are values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from tiercel.protocol.metadata.broker_records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from tiercel.protocol.metadata.cluster_records import (
    FeatureLevelRecord,
    ProducerIdsRecord,
    ZkMigrationStateRecord,
)
from tiercel.protocol.metadata.config_records import ClientQuotaRecord, ConfigRecord
from tiercel.protocol.metadata.log_control_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    NoOpRecord,
)
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_version import MetadataVersion
from tiercel.protocol.metadata.security_records import (
    AccessControlEntryRecord,
    DelegationTokenRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from tiercel.protocol.metadata.topic_records import (
    ClearElrRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tiercel.server.metadata.image.acls import AclsDelta
from tiercel.server.metadata.image.client_quotas import ClientQuotasDelta
from tiercel.server.metadata.image.cluster import ClusterDelta
from tiercel.server.metadata.image.configurations import ConfigurationsDelta
from tiercel.server.metadata.image.delegation_tokens import DelegationTokenDelta
from tiercel.server.metadata.image.errors import MetadataReplayError
from tiercel.server.metadata.image.features import FeaturesDelta
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.server.metadata.image.metadata_provenance import MetadataProvenance
from tiercel.server.metadata.image.producer_ids import ProducerIdsDelta
from tiercel.server.metadata.image.scram import ScramDelta
from tiercel.server.metadata.image.topics_delta import TopicsDelta

__all__ = ["MetadataDelta"]


class MetadataDelta:
    """The changes of the records replayed so far on top of ``image``."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.features_delta: FeaturesDelta | None = None
        self.cluster_delta: ClusterDelta | None = None
        self.topics_delta: TopicsDelta | None = None
        self.configs_delta: ConfigurationsDelta | None = None
        self.client_quotas_delta: ClientQuotasDelta | None = None
        self.producer_ids_delta: ProducerIdsDelta | None = None
        self.acls_delta: AclsDelta | None = None
        self.scram_delta: ScramDelta | None = None
        self.delegation_token_delta: DelegationTokenDelta | None = None

    def get_or_create_features_delta(self) -> FeaturesDelta:
        if self.features_delta is None:
            self.features_delta = FeaturesDelta(self.image.features)
        return self.features_delta

    def get_or_create_cluster_delta(self) -> ClusterDelta:
        if self.cluster_delta is None:
            self.cluster_delta = ClusterDelta(self.image.cluster)
        return self.cluster_delta

    def get_or_create_topics_delta(self) -> TopicsDelta:
        if self.topics_delta is None:
            self.topics_delta = TopicsDelta(self.image.topics)
        return self.topics_delta

    def get_or_create_configs_delta(self) -> ConfigurationsDelta:
        if self.configs_delta is None:
            self.configs_delta = ConfigurationsDelta(self.image.configs)
        return self.configs_delta

    def get_or_create_client_quotas_delta(self) -> ClientQuotasDelta:
        if self.client_quotas_delta is None:
            self.client_quotas_delta = ClientQuotasDelta(self.image.client_quotas)
        return self.client_quotas_delta

    def get_or_create_producer_ids_delta(self) -> ProducerIdsDelta:
        if self.producer_ids_delta is None:
            self.producer_ids_delta = ProducerIdsDelta(self.image.producer_ids)
        return self.producer_ids_delta

    def get_or_create_acls_delta(self) -> AclsDelta:
        if self.acls_delta is None:
            self.acls_delta = AclsDelta(self.image.acls)
        return self.acls_delta

    def get_or_create_scram_delta(self) -> ScramDelta:
        if self.scram_delta is None:
            self.scram_delta = ScramDelta(self.image.scram)
        return self.scram_delta

    def get_or_create_delegation_token_delta(self) -> DelegationTokenDelta:
        if self.delegation_token_delta is None:
            self.delegation_token_delta = DelegationTokenDelta(self.image.delegation_tokens)
        return self.delegation_token_delta

    def metadata_version_changed(self) -> MetadataVersion | None:
        """The metadata.version a replayed record set, if one did."""
        return None if self.features_delta is None else self.features_delta.metadata_version_change

    def replay(self, record: MetadataRecord) -> None:
        """Applies one record of the log or of a snapshot to the delta; a record that
        does not fit the image raises MetadataReplayError."""
        replayer = _REPLAYERS.get(type(record))
        if replayer is None:
            raise MetadataReplayError(f"Unknown metadata record type {type(record).__name__}")
        replayer(self, record)

    def _replay_features(self, record: FeatureLevelRecord) -> None:
        self.get_or_create_features_delta().replay(record)

    def _replay_cluster(self, record: Any) -> None:
        self.get_or_create_cluster_delta().replay(record)

    def _replay_topic(self, record: TopicRecord) -> None:
        self.get_or_create_topics_delta().replay_topic(record)

    def _replay_partition(self, record: PartitionRecord) -> None:
        self.get_or_create_topics_delta().replay_partition(record)

    def _replay_partition_change(self, record: PartitionChangeRecord) -> None:
        self.get_or_create_topics_delta().replay_partition_change(record)

    def _replay_clear_elr(self, record: ClearElrRecord) -> None:
        self.get_or_create_topics_delta().replay_clear_elr(record)

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        topic_name = self.get_or_create_topics_delta().replay_remove_topic(record)
        self.get_or_create_configs_delta().remove_topic(topic_name)

    def _replay_config(self, record: ConfigRecord) -> None:
        self.get_or_create_configs_delta().replay(record)

    def _replay_client_quota(self, record: ClientQuotaRecord) -> None:
        self.get_or_create_client_quotas_delta().replay(record)

    def _replay_producer_ids(self, record: ProducerIdsRecord) -> None:
        self.get_or_create_producer_ids_delta().replay(record)

    def _replay_acl(self, record: Any) -> None:
        self.get_or_create_acls_delta().replay(record)

    def _replay_scram(self, record: Any) -> None:
        self.get_or_create_scram_delta().replay(record)

    def _replay_delegation_token(self, record: Any) -> None:
        self.get_or_create_delegation_token_delta().replay(record)

    def _replay_nothing(self, record: NoOpRecord | ZkMigrationStateRecord) -> None:
        pass

    def _replay_transaction_marker(self, record: MetadataRecord) -> None:
        raise MetadataReplayError(
            f"{type(record).__name__} is for the log's reader, which applies a metadata "
            f"transaction's records only once it ends"
        )

    def finish_snapshot(self) -> None:
        """After replaying a whole snapshot: removes whatever the image had that the
        snapshot did not contain. The producer id block is kept, as Kafka's
        ProducerIdsDelta.finishSnapshot keeps it: the next id never goes back."""
        self.get_or_create_features_delta().finish_snapshot()
        self.get_or_create_cluster_delta().finish_snapshot()
        self.get_or_create_topics_delta().finish_snapshot()
        self.get_or_create_configs_delta().finish_snapshot()
        self.get_or_create_client_quotas_delta().finish_snapshot()
        self.get_or_create_acls_delta().finish_snapshot()
        self.get_or_create_scram_delta().finish_snapshot()
        self.get_or_create_delegation_token_delta().finish_snapshot()

    def apply(self, provenance: MetadataProvenance) -> MetadataImage:
        """The next image: the base image with every change made."""
        image = self.image
        return MetadataImage(
            provenance,
            image.features if self.features_delta is None else self.features_delta.apply(),
            image.cluster if self.cluster_delta is None else self.cluster_delta.apply(),
            image.topics if self.topics_delta is None else self.topics_delta.apply(),
            image.configs if self.configs_delta is None else self.configs_delta.apply(),
            (
                image.client_quotas
                if self.client_quotas_delta is None
                else self.client_quotas_delta.apply()
            ),
            (
                image.producer_ids
                if self.producer_ids_delta is None
                else self.producer_ids_delta.apply()
            ),
            image.acls if self.acls_delta is None else self.acls_delta.apply(),
            image.scram if self.scram_delta is None else self.scram_delta.apply(),
            (
                image.delegation_tokens
                if self.delegation_token_delta is None
                else self.delegation_token_delta.apply()
            ),
        )


# Each record type's replayer: Kafka's MetadataDelta.replay switch on MetadataRecordType.
_REPLAYERS: Final[dict[type[MetadataRecord], Callable[[MetadataDelta, Any], None]]] = {
    RegisterBrokerRecord: MetadataDelta._replay_cluster,
    UnregisterBrokerRecord: MetadataDelta._replay_cluster,
    TopicRecord: MetadataDelta._replay_topic,
    PartitionRecord: MetadataDelta._replay_partition,
    ConfigRecord: MetadataDelta._replay_config,
    PartitionChangeRecord: MetadataDelta._replay_partition_change,
    FenceBrokerRecord: MetadataDelta._replay_cluster,
    UnfenceBrokerRecord: MetadataDelta._replay_cluster,
    RemoveTopicRecord: MetadataDelta._replay_remove_topic,
    DelegationTokenRecord: MetadataDelta._replay_delegation_token,
    UserScramCredentialRecord: MetadataDelta._replay_scram,
    FeatureLevelRecord: MetadataDelta._replay_features,
    ClientQuotaRecord: MetadataDelta._replay_client_quota,
    ProducerIdsRecord: MetadataDelta._replay_producer_ids,
    BrokerRegistrationChangeRecord: MetadataDelta._replay_cluster,
    AccessControlEntryRecord: MetadataDelta._replay_acl,
    RemoveAccessControlEntryRecord: MetadataDelta._replay_acl,
    NoOpRecord: MetadataDelta._replay_nothing,
    ZkMigrationStateRecord: MetadataDelta._replay_nothing,
    RemoveUserScramCredentialRecord: MetadataDelta._replay_scram,
    BeginTransactionRecord: MetadataDelta._replay_transaction_marker,
    EndTransactionRecord: MetadataDelta._replay_transaction_marker,
    AbortTransactionRecord: MetadataDelta._replay_transaction_marker,
    RemoveDelegationTokenRecord: MetadataDelta._replay_delegation_token,
    RegisterControllerRecord: MetadataDelta._replay_cluster,
    ClearElrRecord: MetadataDelta._replay_clear_elr,
}
