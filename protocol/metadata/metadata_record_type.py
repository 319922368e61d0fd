"""Every metadata record type of Kafka 4.0 by api key (Kafka's generated
MetadataRecordType), in api key order: 0 to 28 but 6, 13 and 16, records of KRaft's
preview that Kafka removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

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
from tiercel.protocol.metadata.flexible_encoding import MetadataParseError
from tiercel.protocol.metadata.log_control_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    NoOpRecord,
)
from tiercel.protocol.metadata.message_schema import MetadataRecord
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

__all__ = ["METADATA_RECORD_TYPES", "record_class"]

METADATA_RECORD_TYPES: Final[Mapping[int, type[MetadataRecord]]] = MappingProxyType(
    {
        cls.API_KEY: cls
        for cls in (
            RegisterBrokerRecord,
            UnregisterBrokerRecord,
            TopicRecord,
            PartitionRecord,
            ConfigRecord,
            PartitionChangeRecord,
            FenceBrokerRecord,
            UnfenceBrokerRecord,
            RemoveTopicRecord,
            DelegationTokenRecord,
            UserScramCredentialRecord,
            FeatureLevelRecord,
            ClientQuotaRecord,
            ProducerIdsRecord,
            BrokerRegistrationChangeRecord,
            AccessControlEntryRecord,
            RemoveAccessControlEntryRecord,
            NoOpRecord,
            ZkMigrationStateRecord,
            RemoveUserScramCredentialRecord,
            BeginTransactionRecord,
            EndTransactionRecord,
            AbortTransactionRecord,
            RemoveDelegationTokenRecord,
            RegisterControllerRecord,
            ClearElrRecord,
        )
    }
)


def record_class(api_key: int) -> type[MetadataRecord]:
    """The record class of ``api_key`` (Kafka's MetadataRecordType.fromId)."""
    cls = METADATA_RECORD_TYPES.get(api_key)
    if cls is None:
        raise MetadataParseError(f"Unknown metadata id {api_key}")
    return cls
