"""Records as the quorum controller writes them, and replaying them into images, for the
metadata image's tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from tiercel.protocol.metadata.broker_records import BrokerEndpoint, RegisterBrokerRecord
from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord
from tiercel.protocol.metadata.message_schema import MetadataRecord
from tiercel.protocol.metadata.metadata_version import FEATURE_NAME, MetadataVersion
from tiercel.protocol.metadata.topic_records import PartitionRecord, TopicRecord
from tiercel.server.metadata.image.metadata_delta import MetadataDelta
from tiercel.server.metadata.image.metadata_image import MetadataImage
from tiercel.server.metadata.image.metadata_provenance import MetadataProvenance

FOO_ID = uuid.UUID("6d1d2b3a-0c6e-4d6a-9f5b-6a0d5e1f2a3b")
BAR_ID = uuid.UUID("0b9c3e1e-7f0a-4c56-8a3d-2f1e4d5c6b7a")
DIR_A = uuid.UUID("a0000000-0000-4000-8000-00000000000a")
DIR_B = uuid.UUID("b0000000-0000-4000-8000-00000000000b")
DIR_C = uuid.UUID("c0000000-0000-4000-8000-00000000000c")


def metadata_version(version: MetadataVersion = MetadataVersion.IBP_4_0_IV3) -> FeatureLevelRecord:
    return FeatureLevelRecord(name=FEATURE_NAME, feature_level=version.feature_level)


def topic(name: str = "foo", topic_id: uuid.UUID = FOO_ID) -> TopicRecord:
    return TopicRecord(name=name, topic_id=topic_id)


def partition(
    partition_id: int = 0,
    topic_id: uuid.UUID = FOO_ID,
    replicas: tuple[int, ...] = (1, 2, 3),
    leader: int = 1,
    *,
    isr: tuple[int, ...] | None = None,
    directories: tuple[uuid.UUID, ...] = (),
    leader_epoch: int = 0,
    partition_epoch: int = 0,
) -> PartitionRecord:
    return PartitionRecord(
        partition_id=partition_id,
        topic_id=topic_id,
        replicas=replicas,
        isr=replicas if isr is None else isr,
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        directories=directories,
    )


def register_broker(broker_id: int, epoch: int, *, fenced: bool = True) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=broker_id << 64 | epoch),
        broker_epoch=epoch,
        end_points=(
            BrokerEndpoint(
                name="PLAINTEXT", host="localhost", port=9092 + broker_id, security_protocol=0
            ),
        ),
        rack=None,
        fenced=fenced,
    )


def replay(
    records: Iterable[MetadataRecord],
    image: MetadataImage = MetadataImage.EMPTY,
    *,
    snapshot: bool = False,
    offset: int = 0,
) -> tuple[MetadataImage, MetadataDelta]:
    """The image after ``records`` (a snapshot's if ``snapshot``) on top of ``image``,
    and the delta that made it."""
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    if snapshot:
        delta.finish_snapshot()
    return delta.apply(MetadataProvenance(offset, 1, 0, True)), delta
