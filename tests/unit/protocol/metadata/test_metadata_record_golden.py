"""Metadata record values against Kafka's bytes, every record type in every version.

The golden values are derived by hand from Kafka 4.0's schemas
(metadata/src/main/resources/common/metadata/*.json) and its MetadataRecordSerde:
a value starts with three unsigned varints, frame version 1, the schema's apiKey and the
record's version; then the schema's untagged fields in order, in the flexible encoding
(every metadata schema is flexible from version 0): int8/int16/int32/int64 and uint16
big-endian, bool one byte, float64 IEEE 754 big-endian, uuid its 16 bytes, a string or
bytes as uvarint(length + 1) and the bytes (0 = null), an array as uvarint(count + 1)
and its elements; after every struct (nested entries and the record itself) its tagged
fields: uvarint count, then per field in tag order uvarint tag, uvarint size, value.
Only tagged fields whose value is not the schema's default are written.
"""

from __future__ import annotations

import uuid

import pytest

from tiercel.protocol.metadata.broker_records import (
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ControllerEndpoint,
    ControllerFeature,
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
from tiercel.protocol.metadata.config_records import ClientQuotaRecord, ConfigRecord, EntityData
from tiercel.protocol.metadata.log_control_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    NoOpRecord,
)
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_record_serde import (
    ApiMessageAndVersion,
    deserialize,
    serialize,
)
from tiercel.protocol.metadata.metadata_record_type import METADATA_RECORD_TYPES
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

TOPIC_ID = uuid.UUID("0102030405060708090a0b0c0d0e0f10")
INCARNATION_ID = uuid.UUID("11121314151617181911a1b1c1d1e1f1")
DIR_A = uuid.UUID("a0a1a2a3a4a5a6a7a8a9aaabacadaeaf")
DIR_B = uuid.UUID("b0b1b2b3b4b5b6b7b8b9babbbcbdbebf")
DIR_C = uuid.UUID("c0c1c2c3c4c5c6c7c8c9cacbcccdcecf")
ACL_ID = uuid.UUID("d0d1d2d3d4d5d6d7d8d9dadbdcdddedf")
TOPIC_ID_HEX = "0102030405060708090a0b0c0d0e0f10"
INCARNATION_ID_HEX = "11121314151617181911a1b1c1d1e1f1"
DIR_A_HEX = "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"
DIR_B_HEX = "b0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
DIR_C_HEX = "c0c1c2c3c4c5c6c7c8c9cacbcccdcecf"
ACL_ID_HEX = "d0d1d2d3d4d5d6d7d8d9dadbdcdddedf"

NO_TAGS = "00"


def _hex(*parts: str) -> bytes:
    return bytes.fromhex("".join(parts))


PLAINTEXT_ENDPOINT = BrokerEndpoint(name="PLAINTEXT", host="h1", port=9092, security_protocol=0)
PLAINTEXT_ENDPOINT_HEX = (
    "0a504c41494e54455854"  # Name "PLAINTEXT": uvarint(9 + 1), UTF-8
    + "036831"  # Host "h1"
    + "2384"  # Port 9092, uint16
    + "0000"  # SecurityProtocol 0 (PLAINTEXT), int16
    + NO_TAGS
)
MV_FEATURE = BrokerFeature(
    name="metadata.version", min_supported_version=7, max_supported_version=25
)
MV_FEATURE_HEX = (
    "116d657461646174612e76657273696f6e"  # Name "metadata.version": uvarint(16 + 1)
    + "0007"  # MinSupportedVersion 7, int16
    + "0019"  # MaxSupportedVersion 25
    + NO_TAGS
)

GOLDEN: list[tuple[str, MetadataRecord, int, bytes]] = [
    (
        "RegisterBrokerRecord v0",
        RegisterBrokerRecord(
            broker_id=1,
            incarnation_id=INCARNATION_ID,
            broker_epoch=42,
            end_points=(PLAINTEXT_ENDPOINT,),
            features=(MV_FEATURE,),
            rack=None,
        ),
        0,
        _hex(
            "010000",  # frame version 1, api key 0, version 0
            "00000001",  # BrokerId 1
            INCARNATION_ID_HEX,  # IncarnationId
            "000000000000002a",  # BrokerEpoch 42
            "02",  # EndPoints: uvarint(1 + 1)
            PLAINTEXT_ENDPOINT_HEX,
            "02",  # Features: one
            MV_FEATURE_HEX,
            "00",  # Rack null
            "01",  # Fenced true (the schema's default)
            NO_TAGS,
        ),
    ),
    (
        "RegisterBrokerRecord v1",
        RegisterBrokerRecord(
            broker_id=1,
            incarnation_id=INCARNATION_ID,
            broker_epoch=42,
            end_points=(PLAINTEXT_ENDPOINT,),
            features=(),
            rack="rack-1",
            fenced=False,
            in_controlled_shutdown=True,
        ),
        1,
        _hex(
            "010001",  # frame version 1, api key 0, version 1
            "00000001",  # BrokerId
            INCARNATION_ID_HEX,
            "000000000000002a",  # BrokerEpoch
            "02",
            PLAINTEXT_ENDPOINT_HEX,
            "01",  # Features: none, uvarint(0 + 1)
            "077261636b2d31",  # Rack "rack-1"
            "00",  # Fenced false
            "01",  # InControlledShutdown true (v1+)
            NO_TAGS,
        ),
    ),
    (
        "RegisterBrokerRecord v2",
        RegisterBrokerRecord(
            broker_id=1,
            is_migrating_zk_broker=True,
            incarnation_id=INCARNATION_ID,
            broker_epoch=42,
            end_points=(),
            features=(MV_FEATURE,),
        ),
        2,
        _hex(
            "010002",  # frame version 1, api key 0, version 2
            "00000001",  # BrokerId
            "01",  # IsMigratingZkBroker true (v2+, right after BrokerId)
            INCARNATION_ID_HEX,
            "000000000000002a",  # BrokerEpoch
            "01",  # EndPoints: none
            "02",
            MV_FEATURE_HEX,
            "01",  # Rack "" (not null: the schema gives no null default)
            "01",  # Fenced true
            "00",  # InControlledShutdown false
            NO_TAGS,
        ),
    ),
    (
        "RegisterBrokerRecord v3",
        RegisterBrokerRecord(
            broker_id=1,
            incarnation_id=INCARNATION_ID,
            broker_epoch=42,
            end_points=(PLAINTEXT_ENDPOINT,),
            features=(MV_FEATURE,),
            rack=None,
            log_dirs=(DIR_A,),
        ),
        3,
        _hex(
            "010003",  # frame version 1, api key 0, version 3
            "00000001",  # BrokerId
            "00",  # IsMigratingZkBroker false
            INCARNATION_ID_HEX,
            "000000000000002a",  # BrokerEpoch
            "02",
            PLAINTEXT_ENDPOINT_HEX,
            "02",
            MV_FEATURE_HEX,
            "00",  # Rack null
            "01",  # Fenced true
            "00",  # InControlledShutdown false
            "01",  # one tagged field
            "00",  # tag 0: LogDirs
            "11",  # size 17: uvarint(1 + 1) and a uuid
            "02",  # one directory
            DIR_A_HEX,
        ),
    ),
    (
        "UnregisterBrokerRecord v0",
        UnregisterBrokerRecord(broker_id=3, broker_epoch=7),
        0,
        _hex("010100", "00000003", "0000000000000007", NO_TAGS),  # BrokerId, BrokerEpoch
    ),
    (
        "TopicRecord v0",
        TopicRecord(name="foo", topic_id=TOPIC_ID),
        0,
        _hex("010200", "04666f6f", TOPIC_ID_HEX, NO_TAGS),  # Name "foo", TopicId
    ),
    (
        "PartitionRecord v0",
        PartitionRecord(
            partition_id=5,
            topic_id=TOPIC_ID,
            replicas=(1, 2, 3),
            isr=(1, 2),
            removing_replicas=(3,),
            adding_replicas=(),
            leader=1,
            leader_epoch=4,
            partition_epoch=6,
        ),
        0,
        _hex(
            "010300",  # frame version 1, api key 3, version 0
            "00000005",  # PartitionId 5
            TOPIC_ID_HEX,  # TopicId
            "04000000010000000200000003",  # Replicas [1, 2, 3]: uvarint(3 + 1), int32s
            "030000000100000002",  # Isr [1, 2]
            "0200000003",  # RemovingReplicas [3]
            "01",  # AddingReplicas []
            "00000001",  # Leader 1
            "00000004",  # LeaderEpoch 4 (LeaderRecoveryState is tagged: not here)
            "00000006",  # PartitionEpoch 6
            NO_TAGS,  # LeaderRecoveryState 0 is its default
        ),
    ),
    (
        "PartitionRecord v1",
        PartitionRecord(
            partition_id=5,
            topic_id=TOPIC_ID,
            replicas=(1, 2),
            isr=(1, 2),
            leader=2,
            leader_recovery_state=1,
            leader_epoch=4,
            partition_epoch=6,
            directories=(DIR_A, DIR_B),
        ),
        1,
        _hex(
            "010301",  # frame version 1, api key 3, version 1
            "00000005",  # PartitionId
            TOPIC_ID_HEX,
            "030000000100000002",  # Replicas [1, 2]
            "030000000100000002",  # Isr [1, 2]
            "01",  # RemovingReplicas []
            "01",  # AddingReplicas []
            "00000002",  # Leader 2
            "00000004",  # LeaderEpoch
            "00000006",  # PartitionEpoch
            "03",  # Directories (v1+): two uuids
            DIR_A_HEX,
            DIR_B_HEX,
            "01",  # one tagged field
            "000101",  # tag 0 LeaderRecoveryState, size 1, 1 (RECOVERING)
        ),
    ),
    (
        "PartitionRecord v2",
        PartitionRecord(
            partition_id=5,
            topic_id=TOPIC_ID,
            replicas=(1, 2, 3),
            isr=(1, 2),
            leader=1,
            leader_epoch=4,
            partition_epoch=6,
            directories=(DIR_A, DIR_B, DIR_C),
            eligible_leader_replicas=(3,),
            last_known_elr=(),
        ),
        2,
        _hex(
            "010302",  # frame version 1, api key 3, version 2
            "00000005",  # PartitionId
            TOPIC_ID_HEX,
            "04000000010000000200000003",  # Replicas [1, 2, 3]
            "030000000100000002",  # Isr [1, 2]
            "01",  # RemovingReplicas []
            "01",  # AddingReplicas []
            "00000001",  # Leader
            "00000004",  # LeaderEpoch
            "00000006",  # PartitionEpoch
            "04",  # Directories: three
            DIR_A_HEX,
            DIR_B_HEX,
            DIR_C_HEX,
            "02",  # two tagged fields
            "01",  # tag 1: EligibleLeaderReplicas (v2+)
            "05",  # size 5
            "0200000003",  # [3]
            "02",  # tag 2: LastKnownElr: empty, which is not its null default
            "01",  # size 1
            "01",  # []
        ),
    ),
    (
        "ConfigRecord v0",
        ConfigRecord(resource_type=2, resource_name="foo", name="cleanup.policy", value="compact"),
        0,
        _hex(
            "010400",  # frame version 1, api key 4, version 0
            "02",  # ResourceType 2 (TOPIC)
            "04666f6f",  # ResourceName "foo"
            "0f636c65616e75702e706f6c696379",  # Name "cleanup.policy"
            "08636f6d70616374",  # Value "compact"
            NO_TAGS,
        ),
    ),
    (
        "ConfigRecord v0, a deletion",
        ConfigRecord(resource_type=4, resource_name="", name="cleanup.policy", value=None),
        0,
        _hex("010400", "04", "01", "0f636c65616e75702e706f6c696379", "00", NO_TAGS),
    ),
    (
        "PartitionChangeRecord v0",
        PartitionChangeRecord(partition_id=5, topic_id=TOPIC_ID, isr=(1, 2), leader=2),
        0,
        _hex(
            "010500",  # frame version 1, api key 5, version 0
            "00000005",  # PartitionId
            TOPIC_ID_HEX,  # TopicId; every other field is tagged
            "02",  # two tagged fields
            "00",  # tag 0: Isr
            "09",  # size 9
            "030000000100000002",  # [1, 2]
            "01",  # tag 1: Leader
            "04",  # size 4
            "00000002",  # 2
        ),
    ),
    (
        "PartitionChangeRecord v1",
        PartitionChangeRecord(
            partition_id=5,
            topic_id=TOPIC_ID,
            leader=-1,
            replicas=(1, 2),
            removing_replicas=(),
            adding_replicas=(2,),
            leader_recovery_state=0,
            directories=(DIR_A, DIR_B),
        ),
        1,
        _hex(
            "010501",  # frame version 1, api key 5, version 1
            "00000005",
            TOPIC_ID_HEX,
            "06",  # six tagged fields, in tag order
            "01" + "04" + "ffffffff",  # tag 1 Leader, size 4, -1 (no leader)
            "02" + "09" + "030000000100000002",  # tag 2 Replicas [1, 2]
            "03" + "01" + "01",  # tag 3 RemovingReplicas []
            "04" + "05" + "0200000002",  # tag 4 AddingReplicas [2]
            "05" + "01" + "00",  # tag 5 LeaderRecoveryState 0 (its default is -1)
            "08" + "21" + "03" + DIR_A_HEX + DIR_B_HEX,  # tag 8 Directories, size 33
        ),
    ),
    (
        "PartitionChangeRecord v2",
        PartitionChangeRecord(
            partition_id=0,
            topic_id=TOPIC_ID,
            isr=(3,),
            eligible_leader_replicas=(),
            last_known_elr=(1, 2),
        ),
        2,
        _hex(
            "010502",  # frame version 1, api key 5, version 2
            "00000000",
            TOPIC_ID_HEX,
            "03",  # three tagged fields
            "00" + "05" + "0200000003",  # tag 0 Isr [3]
            "06" + "01" + "01",  # tag 6 EligibleLeaderReplicas [] (v2+)
            "07" + "09" + "030000000100000002",  # tag 7 LastKnownElr [1, 2] (v2+)
        ),
    ),
    (
        "FenceBrokerRecord v0",
        FenceBrokerRecord(id=2, epoch=10),
        0,
        _hex("010700", "00000002", "000000000000000a", NO_TAGS),  # Id, Epoch
    ),
    (
        "UnfenceBrokerRecord v0",
        UnfenceBrokerRecord(id=2, epoch=10),
        0,
        _hex("010800", "00000002", "000000000000000a", NO_TAGS),  # Id, Epoch
    ),
    (
        "RemoveTopicRecord v0",
        RemoveTopicRecord(topic_id=TOPIC_ID),
        0,
        _hex("010900", TOPIC_ID_HEX, NO_TAGS),
    ),
    (
        "DelegationTokenRecord v0",
        DelegationTokenRecord(
            owner="User:alice",
            requester="User:bob",
            renewers=("User:carol",),
            issue_timestamp=1000,
            max_timestamp=2000,
            expiration_timestamp=1500,
            token_id="tok",
        ),
        0,
        _hex(
            "010a00",  # frame version 1, api key 10, version 0
            "0b557365723a616c696365",  # Owner "User:alice"
            "09557365723a626f62",  # Requester "User:bob"
            "02" + "0b557365723a6361726f6c",  # Renewers ["User:carol"]
            "00000000000003e8",  # IssueTimestamp 1000
            "00000000000007d0",  # MaxTimestamp 2000
            "00000000000005dc",  # ExpirationTimestamp 1500
            "04746f6b",  # TokenId "tok"
            NO_TAGS,
        ),
    ),
    (
        "UserScramCredentialRecord v0",
        UserScramCredentialRecord(
            name="alice",
            mechanism=1,
            salt=b"\x01\x02",
            stored_key=b"\xaa\xbb\xcc",
            server_key=b"\xdd",
            iterations=4096,
        ),
        0,
        _hex(
            "010b00",  # frame version 1, api key 11, version 0
            "06616c696365",  # Name "alice"
            "01",  # Mechanism 1 (SCRAM-SHA-256)
            "030102",  # Salt: uvarint(2 + 1), bytes
            "04aabbcc",  # StoredKey
            "02dd",  # ServerKey
            "00001000",  # Iterations 4096
            NO_TAGS,
        ),
    ),
    (
        "FeatureLevelRecord v0",
        FeatureLevelRecord(name="metadata.version", feature_level=25),
        0,
        _hex("010c00", "116d657461646174612e76657273696f6e", "0019", NO_TAGS),
    ),
    (
        "ClientQuotaRecord v0",
        ClientQuotaRecord(
            entity=(
                EntityData(entity_type="user", entity_name="alice"),
                EntityData(entity_type="client-id", entity_name=None),
            ),
            key="producer_byte_rate",
            value=1024.0,
            remove=False,
        ),
        0,
        _hex(
            "010e00",  # frame version 1, api key 14, version 0
            "03",  # Entity: two
            "0575736572" + "06616c696365" + NO_TAGS,  # "user", "alice", tags
            "0a636c69656e742d6964" + "00" + NO_TAGS,  # "client-id", null (the default)
            "1370726f64756365725f627974655f72617465",  # Key "producer_byte_rate"
            "4090000000000000",  # Value 1024.0, float64
            "00",  # Remove false
            NO_TAGS,
        ),
    ),
    (
        "ProducerIdsRecord v0",
        ProducerIdsRecord(broker_id=1, broker_epoch=42, next_producer_id=2000),
        0,
        _hex("010f00", "00000001", "000000000000002a", "00000000000007d0", NO_TAGS),
    ),
    (
        "BrokerRegistrationChangeRecord v0",
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=42),
        0,
        _hex("011100", "00000001", "000000000000002a", NO_TAGS),  # Fenced 0: no change
    ),
    (
        "BrokerRegistrationChangeRecord v1",
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=42, fenced=1),
        1,
        _hex(
            "011101",
            "00000001",  # BrokerId
            "000000000000002a",  # BrokerEpoch
            "01",  # one tagged field
            "000101",  # tag 0 Fenced, size 1, 1 (fenced)
        ),
    ),
    (
        "BrokerRegistrationChangeRecord v2",
        BrokerRegistrationChangeRecord(
            broker_id=1, broker_epoch=42, fenced=-1, in_controlled_shutdown=1, log_dirs=(DIR_A,)
        ),
        2,
        _hex(
            "011102",
            "00000001",
            "000000000000002a",
            "03",  # three tagged fields
            "0001ff",  # tag 0 Fenced -1 (unfenced)
            "010101",  # tag 1 InControlledShutdown 1 (v1+)
            "02" + "11" + "02" + DIR_A_HEX,  # tag 2 LogDirs (v2+), size 17
        ),
    ),
    (
        "AccessControlEntryRecord v0",
        AccessControlEntryRecord(
            id=ACL_ID,
            resource_type=2,
            resource_name="foo",
            pattern_type=3,
            principal="User:alice",
            host="*",
            operation=3,
            permission_type=3,
        ),
        0,
        _hex(
            "011200",  # frame version 1, api key 18, version 0
            ACL_ID_HEX,  # Id
            "02",  # ResourceType 2 (TOPIC)
            "04666f6f",  # ResourceName "foo"
            "03",  # PatternType 3 (LITERAL)
            "0b557365723a616c696365",  # Principal "User:alice"
            "022a",  # Host "*"
            "03",  # Operation 3 (READ)
            "03",  # PermissionType 3 (ALLOW)
            NO_TAGS,
        ),
    ),
    (
        "RemoveAccessControlEntryRecord v0",
        RemoveAccessControlEntryRecord(id=ACL_ID),
        0,
        _hex("011300", ACL_ID_HEX, NO_TAGS),
    ),
    ("NoOpRecord v0", NoOpRecord(), 0, _hex("011400", NO_TAGS)),
    (
        "ZkMigrationStateRecord v0",
        ZkMigrationStateRecord(zk_migration_state=0),
        0,
        _hex("011500", "00", NO_TAGS),  # ZkMigrationState 0 (NONE)
    ),
    (
        "RemoveUserScramCredentialRecord v0",
        RemoveUserScramCredentialRecord(name="alice", mechanism=2),
        0,
        _hex("011600", "06616c696365", "02", NO_TAGS),  # Name, Mechanism 2 (SHA-512)
    ),
    (
        "BeginTransactionRecord v0",
        BeginTransactionRecord(name="create-topics"),
        0,
        _hex(
            "011700",  # frame version 1, api key 23, version 0
            "01",  # one tagged field
            "00",  # tag 0: Name
            "0e",  # size 14
            "0e6372656174652d746f70696373",  # "create-topics"
        ),
    ),
    ("BeginTransactionRecord v0, unnamed", BeginTransactionRecord(), 0, _hex("011700", NO_TAGS)),
    ("EndTransactionRecord v0", EndTransactionRecord(), 0, _hex("011800", NO_TAGS)),
    (
        "AbortTransactionRecord v0",
        AbortTransactionRecord(reason="x"),
        0,
        _hex("011900", "01", "00" + "02" + "0278"),  # tag 0 Reason "x", size 2
    ),
    (
        "RemoveDelegationTokenRecord v0",
        RemoveDelegationTokenRecord(token_id="tok"),
        0,
        _hex("011a00", "04746f6b", NO_TAGS),
    ),
    (
        "RegisterControllerRecord v0",
        RegisterControllerRecord(
            controller_id=3000,
            incarnation_id=INCARNATION_ID,
            end_points=(
                ControllerEndpoint(name="CONTROLLER", host="h2", port=9093, security_protocol=1),
            ),
            features=(
                ControllerFeature(
                    name="metadata.version", min_supported_version=7, max_supported_version=25
                ),
                ControllerFeature(
                    name="kraft.version", min_supported_version=0, max_supported_version=1
                ),
            ),
        ),
        0,
        _hex(
            "011b00",  # frame version 1, api key 27, version 0
            "00000bb8",  # ControllerId 3000
            INCARNATION_ID_HEX,  # IncarnationId
            "00",  # ZkMigrationReady false
            "02",  # EndPoints: one
            "0b434f4e54524f4c4c4552" + "036832" + "2385" + "0001" + NO_TAGS,  # SSL, 9093
            "03",  # Features: two
            MV_FEATURE_HEX,
            "0e6b726166742e76657273696f6e" + "0000" + "0001" + NO_TAGS,  # kraft.version
            NO_TAGS,
        ),
    ),
    (
        "ClearElrRecord v0",
        ClearElrRecord(topic_name="foo"),
        0,
        _hex("011c00", "04666f6f", NO_TAGS),  # TopicName "foo"
    ),
    (
        "ClearElrRecord v0, every topic",
        ClearElrRecord(topic_name=""),
        0,
        _hex("011c00", "01", NO_TAGS),
    ),
]


@pytest.mark.parametrize(
    ("record", "version", "golden"), [g[1:] for g in GOLDEN], ids=[g[0] for g in GOLDEN]
)
def test_serialize_writes_kafkas_bytes(record: MetadataRecord, version: int, golden: bytes) -> None:
    assert serialize(ApiMessageAndVersion(record, version)) == golden


@pytest.mark.parametrize(
    ("record", "version", "golden"), [g[1:] for g in GOLDEN], ids=[g[0] for g in GOLDEN]
)
def test_deserialize_reads_kafkas_bytes(
    record: MetadataRecord, version: int, golden: bytes
) -> None:
    assert deserialize(golden) == ApiMessageAndVersion(record, version)
    assert deserialize(memoryview(golden)) == ApiMessageAndVersion(record, version)


def test_every_record_type_and_version_has_a_golden_value() -> None:
    covered = {(type(record), version) for _, record, version, _ in GOLDEN}
    expected = {
        (cls, version)
        for cls in METADATA_RECORD_TYPES.values()
        for version in range(cls.HIGHEST_SUPPORTED_VERSION + 1)
    }
    assert covered == expected


def test_the_versions_are_kafka_4_0s() -> None:
    versions = {key: cls.HIGHEST_SUPPORTED_VERSION for key, cls in METADATA_RECORD_TYPES.items()}
    several = {key: top for key, top in versions.items() if top}
    # RegisterBrokerRecord 0-3, PartitionRecord and PartitionChangeRecord 0-2,
    # BrokerRegistrationChangeRecord 0-2; every other type has version 0 only.
    assert several == {0: 3, 3: 2, 5: 2, 17: 2}
    assert sorted(versions) == [k for k in range(29) if k not in (6, 13, 16)]
