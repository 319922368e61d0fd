"""The metadata records of cluster-wide state: feature levels and producer id blocks
(KIP-631, KIP-584, KIP-778, KIP-730), and the ZooKeeper migration state of Kafka 3.4 to
3.9, as Kafka 4.0's schemas declare them.

    12 FeatureLevelRecord       v0: Name string, FeatureLevel int16 (0: not enabled)
    15 ProducerIdsRecord        v0: BrokerId int32, BrokerEpoch int64 (-1),
                                NextProducerId int64 (the first id of the next block)
    21 ZkMigrationStateRecord   v0: ZkMigrationState int8

New logs and snapshots start with the FeatureLevelRecord of ``metadata.version``, which
tells how the records after it were written; its version stays 0 so that every reader
can read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiercel.protocol.metadata.field_types import INT8, INT16, INT32, INT64, STRING
from tiercel.protocol.metadata.message_schema import MetadataRecord, metadata_record, schema_field

__all__ = ["FeatureLevelRecord", "ProducerIdsRecord", "ZkMigrationStateRecord"]


@metadata_record(api_key=12, versions="0")
@dataclass(frozen=True, kw_only=True)
class FeatureLevelRecord(MetadataRecord):
    """The finalized level of a feature (``metadata.version``, ``kraft.version``...)."""

    name: str = schema_field(STRING)
    feature_level: int = schema_field(INT16)


@metadata_record(api_key=15, versions="0")
@dataclass(frozen=True, kw_only=True)
class ProducerIdsRecord(MetadataRecord):
    """A block of producer ids handed to a broker (AllocateProducerIds)."""

    broker_id: int = schema_field(INT32)
    broker_epoch: int = schema_field(INT64, default=-1)
    next_producer_id: int = schema_field(INT64)


@metadata_record(api_key=21, versions="0")
@dataclass(frozen=True, kw_only=True)
class ZkMigrationStateRecord(MetadataRecord):
    """The ZooKeeper-to-KRaft migration state Kafka 3.4 to 3.9 wrote into every snapshot
    (FeaturesImage.write); Kafka 4.0 has no migration, so it is only read."""

    zk_migration_state: int = schema_field(INT8)
