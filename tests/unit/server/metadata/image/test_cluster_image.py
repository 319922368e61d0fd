"""ClusterImage and ClusterDelta: broker and controller registrations replayed as
Kafka's ClusterDelta replays them (fencing and controlled shutdown only for the
registered epoch), and written back as records at each metadata.version."""

from __future__ import annotations

import uuid

import pytest
from metadata_image_records import DIR_A, DIR_B, register_broker, replay

from tiercel.protocol.metadata.broker_records import (
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ControllerEndpoint,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from tiercel.protocol.metadata.metadata_version import MetadataVersion
from tiercel.server.metadata.image.broker_registration import (
    BrokerRegistration,
    Endpoint,
    VersionRange,
)
from tiercel.server.metadata.image.errors import MetadataReplayError, UnwritableMetadataError
from tiercel.server.metadata.image.image_writer import ImageWriterOptions, RecordListWriter
from tiercel.server.metadata.image.metadata_image import MetadataImage


def _two_brokers() -> MetadataImage:
    image, _ = replay([register_broker(1, 10), register_broker(2, 20)])
    return image


def test_a_registration_has_the_records_fields() -> None:
    record = RegisterBrokerRecord(
        broker_id=3,
        incarnation_id=uuid.UUID(int=7),
        broker_epoch=30,
        end_points=register_broker(3, 30).end_points,
        features=(
            BrokerFeature(
                name="metadata.version", min_supported_version=7, max_supported_version=25
            ),
        ),
        rack="r1",
        fenced=False,
        in_controlled_shutdown=True,
        log_dirs=(DIR_B, DIR_A),
    )
    image, _ = replay([record])
    broker = image.cluster.broker(3)
    assert broker == BrokerRegistration(
        3,
        30,
        uuid.UUID(int=7),
        {"PLAINTEXT": Endpoint("PLAINTEXT", 0, "localhost", 9095)},
        {"metadata.version": VersionRange(7, 25)},
        "r1",
        fenced=False,
        in_controlled_shutdown=True,
        directories=(DIR_A, DIR_B),  # sorted, as Kafka keeps them
    )
    assert image.cluster.broker_epoch(3) == 30 and image.cluster.broker_epoch(4) == -1
    assert VersionRange(7, 25).contains(25) and not VersionRange(7, 25).contains(6)


def test_a_new_registration_replaces_the_old_and_unregistering_removes_it() -> None:
    image, _ = replay(
        [
            register_broker(1, 11, fenced=False),
            UnregisterBrokerRecord(broker_id=2, broker_epoch=20),
        ],
        _two_brokers(),
    )
    assert list(image.cluster.brokers) == [1]
    broker = image.cluster.broker(1)
    assert broker is not None and (broker.epoch, broker.fenced) == (11, False)


def test_fence_and_unfence_records_of_the_registered_epoch() -> None:
    image, _ = replay([UnfenceBrokerRecord(id=1, epoch=10)], _two_brokers())
    one = image.cluster.broker(1)
    assert one is not None and not one.fenced
    image, _ = replay([FenceBrokerRecord(id=1, epoch=10)], image)
    one = image.cluster.broker(1)
    assert one is not None and one.fenced


@pytest.mark.parametrize(
    "record, message",
    [
        (
            FenceBrokerRecord(id=1, epoch=9),
            "Tried to fence broker 1, but the given epoch, 9, did not match the current broker "
            "epoch, 10",
        ),
        (
            UnfenceBrokerRecord(id=5, epoch=1),
            "Tried to unfence broker 5, but that broker was not registered.",
        ),
        (
            BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=21, fenced=-1),
            "Tried to change broker 2, but the given epoch, 21",
        ),
        (
            BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=2),
            "unknown value for fenced field: 2",
        ),
        (
            BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, in_controlled_shutdown=-1),
            "unknown value for inControlledShutdown field: -1",
        ),
    ],
)
def test_changes_that_do_not_fit_the_registration_are_refused(record: object, message: str) -> None:
    with pytest.raises(MetadataReplayError, match=message):
        replay([record], _two_brokers())  # type: ignore[list-item]


def test_registration_change_records() -> None:
    base = _two_brokers()
    image, _ = replay(
        [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=-1)], base
    )
    one = image.cluster.broker(1)
    assert one is not None and not one.fenced and not one.in_controlled_shutdown
    image, _ = replay(
        [
            BrokerRegistrationChangeRecord(
                broker_id=1, broker_epoch=10, in_controlled_shutdown=1, log_dirs=(DIR_B, DIR_A)
            )
        ],
        image,
    )
    one = image.cluster.broker(1)
    assert one is not None and not one.fenced and one.in_controlled_shutdown
    assert one.directories == (DIR_A, DIR_B)
    # A change that changes nothing leaves the delta empty.
    _, delta = replay(
        [BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=20, fenced=1)], base
    )
    assert delta.cluster_delta is not None and not delta.cluster_delta.changed_brokers
    # The delta answers with the registration as of the records replayed so far.
    _, delta = replay([register_broker(7, 70)], base)
    assert delta.cluster_delta is not None
    seven = delta.cluster_delta.broker(7)
    assert seven is not None and seven.epoch == 70
    assert delta.cluster_delta.broker(1) is base.cluster.broker(1)


def _controller(controller_id: int) -> RegisterControllerRecord:
    return RegisterControllerRecord(
        controller_id=controller_id,
        incarnation_id=uuid.UUID(int=controller_id),
        end_points=(
            ControllerEndpoint(name="CONTROLLER", host="localhost", port=9093, security_protocol=0),
        ),
    )


def test_controllers_register() -> None:
    image, _ = replay([_controller(100), _controller(101)])
    assert sorted(image.cluster.controllers) == [100, 101]
    assert image.cluster.controllers[100].listeners["CONTROLLER"].port == 9093
    assert not image.cluster.is_empty()


def _write(image: MetadataImage, version: MetadataVersion) -> list[object]:
    writer = RecordListWriter()
    image.cluster.write(writer, ImageWriterOptions(version))
    return [(type(r.message).__name__, r.version) for r in writer.records]


def test_written_at_each_metadata_version() -> None:
    image, _ = replay([register_broker(1, 10), _controller(100)])
    assert _write(image, MetadataVersion.IBP_4_0_IV3) == [
        ("RegisterBrokerRecord", 3),
        ("RegisterControllerRecord", 0),
    ]
    # Before 3.7-IV0 there is no controller record: the controllers are a loss.
    with pytest.raises(UnwritableMetadataError, match="controller registration data"):
        _write(image, MetadataVersion.IBP_3_6_IV2)
    lost: list[Exception] = []
    writer = RecordListWriter()
    image.cluster.write(writer, ImageWriterOptions(MetadataVersion.IBP_3_6_IV2, lost.append))
    assert [type(r.message).__name__ for r in writer.records] == ["RegisterBrokerRecord"]
    assert writer.records[0].version == 2 and len(lost) == 1


def test_log_directories_before_3_7_iv2_are_a_loss() -> None:
    image, _ = replay(
        [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, log_dirs=(DIR_A,))],
        _two_brokers(),
    )
    with pytest.raises(UnwritableMetadataError, match="online log directories"):
        _write(image, MetadataVersion.IBP_3_7_IV1)
    assert _write(_two_brokers(), MetadataVersion.IBP_3_3_IV3) == [("RegisterBrokerRecord", 1)] * 2


def test_a_migrating_zk_broker_before_3_4_iv0_is_a_loss() -> None:
    migrating = RegisterBrokerRecord(broker_id=1, broker_epoch=10, is_migrating_zk_broker=True)
    image, _ = replay([migrating])
    with pytest.raises(UnwritableMetadataError, match="isMigratingZkBroker state"):
        _write(image, MetadataVersion.IBP_3_3_IV3)
    writer = RecordListWriter()
    image.cluster.write(writer, ImageWriterOptions(MetadataVersion.IBP_3_4_IV0))
    assert writer.records[0].message == migrating and writer.records[0].version == 2


def test_directories_are_in_kafkas_uuid_order() -> None:
    # Uuid.compareTo compares the two halves as signed longs: a top bit set sorts first.
    low, high = uuid.UUID(int=1 << 64), uuid.UUID(int=1 << 127)
    image, _ = replay([RegisterBrokerRecord(broker_id=1, broker_epoch=10, log_dirs=(low, high))])
    broker = image.cluster.broker(1)
    assert broker is not None and broker.directories == (high, low)
    image, _ = replay(
        [BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, log_dirs=(DIR_A, low, high))],
        image,
    )
    broker = image.cluster.broker(1)
    assert broker is not None and broker.directories == (high, DIR_A, low)
