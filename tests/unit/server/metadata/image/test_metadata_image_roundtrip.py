"""The image written as a snapshot's records and read back is the same image (Kafka's
ImageWriter and the snapshot load of MetadataLoader): records → image → records →
image, through the bytes of __cluster_metadata, at every metadata.version, for logs
generated with every kind of record that version can hold."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from metadata_image_records import replay

from tiercel.protocol.metadata.broker_records import (
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ControllerEndpoint,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnregisterBrokerRecord,
)
from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord, ProducerIdsRecord
from tiercel.protocol.metadata.config_records import ClientQuotaRecord, ConfigRecord, EntityData
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_record_serde import (
    ApiMessageAndVersion,
    deserialize,
    serialize,
)
from tiercel.protocol.metadata.metadata_version import FEATURE_NAME, MetadataVersion
from tiercel.protocol.metadata.security_records import (
    AccessControlEntryRecord,
    DelegationTokenRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from tiercel.protocol.metadata.topic_records import (
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from tiercel.server.metadata.image.image_writer import ImageWriterOptions, RecordListWriter
from tiercel.server.metadata.image.metadata_image import MetadataImage

_NAMES = st.text("abcxyz-._", min_size=1, max_size=6)
_BROKERS = st.integers(0, 5)
_DIRECTORIES = st.sampled_from(
    [uuid.UUID(int=0), uuid.UUID(int=2), *(uuid.UUID(int=i << 64) for i in range(1, 4))]
)


class _Log:
    """Records being drawn, each at the version its metadata.version writes."""

    def __init__(self, version: MetadataVersion) -> None:
        self.version = version
        self.records: list[ApiMessageAndVersion] = []

    def __repr__(self) -> str:
        lines = "".join(f"\n    {r.message!r} v{r.version}" for r in self.records)
        return f"_Log({self.version}):{lines}"

    def add(self, record: MetadataRecord, version: int = 0) -> None:
        self.records.append(ApiMessageAndVersion(record, version))


def _brokers(draw: st.DrawFn, log: _Log) -> None:
    dirs_supported = log.version.is_directory_assignment_supported()
    for broker_id in draw(st.lists(_BROKERS, unique=True, max_size=4)):
        epoch = draw(st.integers(0, 2**40))
        record = RegisterBrokerRecord(
            broker_id=broker_id,
            is_migrating_zk_broker=draw(st.booleans()) and log.version.is_migration_supported(),
            incarnation_id=draw(st.uuids()),
            broker_epoch=epoch,
            end_points=tuple(
                BrokerEndpoint(
                    name=name,
                    host="h",
                    port=draw(st.integers(0, 65535)),
                    security_protocol=draw(st.integers(0, 3)),
                )
                for name in draw(st.lists(_NAMES, unique=True, max_size=2))
            ),
            features=(
                BrokerFeature(name=FEATURE_NAME, min_supported_version=7, max_supported_version=25),
            ),
            rack=draw(st.none() | _NAMES),
            fenced=draw(st.booleans()),
            in_controlled_shutdown=draw(st.booleans()),
            log_dirs=tuple(draw(st.lists(_DIRECTORIES, unique=True, max_size=2)))
            if dirs_supported
            else (),
        )
        log.add(record, log.version.register_broker_record_version())
        if draw(st.booleans()):
            log_dirs = (
                tuple(draw(st.lists(_DIRECTORIES, unique=True, max_size=2)))
                if dirs_supported
                else ()
            )
            change = BrokerRegistrationChangeRecord(
                broker_id=broker_id,
                broker_epoch=epoch,
                fenced=draw(st.sampled_from([-1, 0, 1])),
                in_controlled_shutdown=draw(st.sampled_from([0, 1])),
                log_dirs=log_dirs,
            )
            log.add(change, 2 if dirs_supported else 1)
        if draw(st.integers(0, 4)) == 0:
            log.add(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=epoch))
    if log.version.is_controller_registration_supported():
        for controller_id in draw(st.lists(st.integers(100, 102), unique=True, max_size=2)):
            record = RegisterControllerRecord(
                controller_id=controller_id,
                incarnation_id=draw(st.uuids()),
                end_points=(
                    ControllerEndpoint(name="CONTROLLER", host="h", port=9093, security_protocol=0),
                ),
                features=(),
            )
            log.add(record, log.version.register_controller_record_version())


def _replicas(draw: st.DrawFn) -> tuple[int, ...]:
    return tuple(draw(st.lists(_BROKERS, unique=True, min_size=1, max_size=3)))


def _partition(
    draw: st.DrawFn, log: _Log, topic_id: uuid.UUID, partition_id: int
) -> tuple[int, ...]:
    replicas = _replicas(draw)
    directories: tuple[uuid.UUID, ...] = ()
    if log.version.is_directory_assignment_supported() and draw(st.booleans()):
        directories = tuple(draw(_DIRECTORIES) for _ in replicas)
    elr = log.version.is_elr_supported()
    record = PartitionRecord(
        partition_id=partition_id,
        topic_id=topic_id,
        replicas=replicas,
        isr=replicas[: draw(st.integers(0, len(replicas)))],
        removing_replicas=replicas[:1] if draw(st.booleans()) else (),
        adding_replicas=replicas[-1:] if draw(st.booleans()) else (),
        leader=draw(st.sampled_from([-1, *replicas])),
        leader_recovery_state=draw(st.sampled_from([0, 1])),
        leader_epoch=draw(st.integers(-1, 100)),
        partition_epoch=draw(st.integers(-1, 100)),
        directories=directories,
        eligible_leader_replicas=draw(st.none() | st.just(replicas[:1])) if elr else None,
        last_known_elr=draw(st.none() | st.just(replicas[-1:])) if elr else None,
    )
    log.add(record, log.version.partition_record_version())
    return replicas


def _partition_change(
    draw: st.DrawFn, log: _Log, topic_id: uuid.UUID, partition_id: int, replicas: tuple[int, ...]
) -> tuple[int, ...]:
    new_replicas = _replicas(draw) if draw(st.booleans()) else None
    directories = None
    if log.version.is_directory_assignment_supported() and (
        new_replicas is not None or draw(st.booleans())
    ):
        directories = tuple(draw(_DIRECTORIES) for _ in (new_replicas or replicas))
    elr = log.version.is_elr_supported()
    record = PartitionChangeRecord(
        partition_id=partition_id,
        topic_id=topic_id,
        isr=draw(st.none() | st.just((new_replicas or replicas)[:1])),
        leader=draw(st.sampled_from([-2, -1, *(new_replicas or replicas)])),
        replicas=new_replicas,
        leader_recovery_state=draw(st.sampled_from([-1, 0, 1])),
        directories=directories,
        eligible_leader_replicas=draw(st.none() | st.just(())) if elr else None,
        last_known_elr=draw(st.none() | st.just(replicas[:1])) if elr else None,
    )
    log.add(record, log.version.partition_change_record_version())
    return new_replicas or replicas


def _topics(draw: st.DrawFn, log: _Log) -> None:
    for name in draw(st.lists(_NAMES, unique=True, max_size=4)):
        topic_id = draw(st.uuids())
        log.add(TopicRecord(name=name, topic_id=topic_id))
        for partition_id in range(draw(st.integers(0, 3))):
            replicas = _partition(draw, log, topic_id, partition_id)
            for _ in range(draw(st.integers(0, 2))):
                replicas = _partition_change(draw, log, topic_id, partition_id, replicas)
        if draw(st.booleans()):
            log.add(
                ConfigRecord(
                    resource_type=2,
                    resource_name=name,
                    name="retention.ms",
                    value=draw(st.none() | _NAMES),
                )
            )
        if draw(st.integers(0, 3)) == 0:
            log.add(RemoveTopicRecord(topic_id=topic_id))


def _configs_and_quotas(draw: st.DrawFn, log: _Log) -> None:
    for _ in range(draw(st.integers(0, 4))):
        config = ConfigRecord(
            resource_type=draw(st.sampled_from([2, 4, 8, 16, 32, 99])),
            resource_name=draw(st.just("") | _NAMES),
            name=draw(_NAMES),
            value=draw(st.none() | _NAMES),
        )
        log.add(config)
    for _ in range(draw(st.integers(0, 4))):
        types = draw(
            st.lists(st.sampled_from(["user", "client-id", "ip"]), unique=True, min_size=1)
        )
        quota = ClientQuotaRecord(
            entity=tuple(
                EntityData(entity_type=t, entity_name=draw(st.none() | _NAMES)) for t in types
            ),
            key=draw(st.sampled_from(["producer_byte_rate", "consumer_byte_rate"])),
            value=draw(st.floats(allow_nan=False)),
            remove=draw(st.booleans()),
        )
        log.add(quota)
    if draw(st.booleans()):
        log.add(
            ProducerIdsRecord(
                broker_id=1, broker_epoch=5, next_producer_id=draw(st.integers(0, 2**40))
            )
        )


def _security(draw: st.DrawFn, log: _Log) -> None:
    for acl_id in draw(st.lists(st.uuids(), unique=True, max_size=3)):
        acl = AccessControlEntryRecord(
            id=acl_id,
            resource_type=draw(st.integers(1, 7)),
            resource_name=draw(_NAMES),
            pattern_type=draw(st.sampled_from([3, 4])),
            principal="User:" + draw(_NAMES),
            host="*",
            operation=draw(st.integers(2, 14)),
            permission_type=draw(st.sampled_from([2, 3])),
        )
        log.add(acl)
        if draw(st.booleans()):
            log.add(RemoveAccessControlEntryRecord(id=acl_id))
    if log.version.is_scram_supported():
        for _ in range(draw(st.integers(0, 3))):
            name, mechanism = draw(_NAMES), draw(st.sampled_from([1, 2]))
            secret = draw(st.binary(min_size=1, max_size=8))
            log.add(
                UserScramCredentialRecord(
                    name=name,
                    mechanism=mechanism,
                    salt=secret,
                    stored_key=secret,
                    server_key=secret,
                    iterations=4096,
                )
            )
            if draw(st.booleans()):
                log.add(RemoveUserScramCredentialRecord(name=name, mechanism=mechanism))
    if log.version.is_delegation_token_supported():
        for token_id in draw(st.lists(_NAMES, unique=True, max_size=2)):
            log.add(
                DelegationTokenRecord(
                    owner="User:a",
                    requester="User:a",
                    renewers=("User:b",),
                    issue_timestamp=1,
                    max_timestamp=3,
                    expiration_timestamp=2,
                    token_id=token_id,
                )
            )
            if draw(st.booleans()):
                log.add(RemoveDelegationTokenRecord(token_id=token_id))


@st.composite
def metadata_logs(draw: st.DrawFn) -> _Log:
    """A log as a controller of some metadata.version could write it."""
    log = _Log(draw(st.sampled_from(sorted(MetadataVersion))))
    log.add(FeatureLevelRecord(name=FEATURE_NAME, feature_level=log.version.feature_level))
    for name in draw(
        st.lists(
            st.sampled_from(["kraft.version", "group.version", "transaction.version"]), unique=True
        )
    ):
        log.add(FeatureLevelRecord(name=name, feature_level=draw(st.integers(0, 2))))
    _brokers(draw, log)
    _topics(draw, log)
    _configs_and_quotas(draw, log)
    _security(draw, log)
    return log


def _through_bytes(records: list[ApiMessageAndVersion]) -> list[MetadataRecord]:
    """The records as a reader of __cluster_metadata gets them back."""
    read = [deserialize(serialize(record)) for record in records]
    assert read == records
    return [record.message for record in read]


def _written(image: MetadataImage, version: MetadataVersion) -> list[ApiMessageAndVersion]:
    writer = RecordListWriter()
    image.write(writer, ImageWriterOptions(version))
    return writer.records


@settings(max_examples=100, deadline=None)
@given(metadata_logs(), metadata_logs())
def test_records_to_image_to_records_to_image(log: _Log, other: _Log) -> None:
    image, _ = replay(_through_bytes(log.records), offset=len(log.records) - 1)
    snapshot = _written(image, log.version)
    assert snapshot[0] == ApiMessageAndVersion(
        FeatureLevelRecord(name=FEATURE_NAME, feature_level=log.version.feature_level), 0
    )
    # The snapshot loaded on an empty image, as a new node loads it...
    loaded, _ = replay(_through_bytes(snapshot), offset=image.offset, snapshot=True)
    assert loaded == image
    # ...and on whatever image a node had, whose state the snapshot replaces.
    had, _ = replay(_through_bytes(other.records))
    reloaded, _ = replay(_through_bytes(snapshot), had, offset=image.offset, snapshot=True)
    # All but the producer id block, which a snapshot without one leaves as it was
    # (Kafka's ProducerIdsDelta.finishSnapshot does nothing).
    producer_ids = had.producer_ids if image.producer_ids.is_empty() else image.producer_ids
    assert reloaded == dataclasses.replace(image, producer_ids=producer_ids)
    # The image writes the same records again.
    assert _written(loaded, log.version) == snapshot


def test_every_record_a_snapshot_holds_is_at_the_version_its_metadata_version_writes() -> None:
    version = MetadataVersion.IBP_3_7_IV2
    image, _ = replay(
        [
            FeatureLevelRecord(name=FEATURE_NAME, feature_level=version.feature_level),
            RegisterBrokerRecord(broker_id=1, broker_epoch=1),
            RegisterControllerRecord(controller_id=100),
            TopicRecord(name="foo", topic_id=uuid.UUID(int=1)),
            PartitionRecord(
                partition_id=0, topic_id=uuid.UUID(int=1), replicas=(1,), isr=(1,), leader=1
            ),
        ]
    )
    versions: dict[str, Any] = {
        type(r.message).__name__: r.version for r in _written(image, version)
    }
    assert versions == {
        "FeatureLevelRecord": 0,
        "RegisterBrokerRecord": 3,
        "RegisterControllerRecord": 0,
        "TopicRecord": 0,
        "PartitionRecord": 1,
    }
