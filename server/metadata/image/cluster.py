"""The registered brokers and controllers of the metadata image, and changes to them
(Kafka's ClusterImage and ClusterDelta)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Final

from tiercel.protocol.metadata.broker_records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from tiercel.server.metadata.image.broker_registration import BrokerRegistration
from tiercel.server.metadata.image.controller_registration import ControllerRegistration
from tiercel.server.metadata.image.errors import MetadataReplayError
from tiercel.server.metadata.image.image_writer import ImageWriter, ImageWriterOptions
from tiercel.server.metadata.image.map_changes import apply_changes

__all__ = ["ClusterDelta", "ClusterImage"]

# BrokerRegistrationChangeRecord's Fenced: 1 fence, -1 unfence, 0 no change
# (BrokerRegistrationFencingChange); its InControlledShutdown: 1 entered, 0 no change
# (BrokerRegistrationInControlledShutdownChange: only a new registration leaves it).
_FENCING_CHANGES: Final[Mapping[int, bool | None]] = MappingProxyType({1: True, 0: None, -1: False})
_SHUTDOWN_CHANGES: Final[Mapping[int, bool | None]] = MappingProxyType({1: True, 0: None})


@dataclass(frozen=True, slots=True)
class ClusterImage:
    """Registered brokers and controllers by node id. A value; any thread."""

    EMPTY: ClassVar[ClusterImage]

    brokers: Mapping[int, BrokerRegistration]
    controllers: Mapping[int, ControllerRegistration]

    def is_empty(self) -> bool:
        return not self.brokers and not self.controllers

    def broker(self, node_id: int) -> BrokerRegistration | None:
        return self.brokers.get(node_id)

    def broker_epoch(self, broker_id: int) -> int:
        """The registered broker's epoch, -1 if it is not registered."""
        broker = self.brokers.get(broker_id)
        return -1 if broker is None else broker.epoch

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        for broker in self.brokers.values():
            writer.write(broker.to_record(options))
        if not self.controllers:
            return
        if not options.metadata_version.is_controller_registration_supported():
            options.handle_loss("controller registration data")
            return
        for controller in self.controllers.values():
            writer.write(controller.to_record(options))


ClusterImage.EMPTY = ClusterImage(MappingProxyType({}), MappingProxyType({}))

BrokerRecord = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | BrokerRegistrationChangeRecord
    | RegisterControllerRecord
)


class ClusterDelta:
    """Changes to the registrations: the new one of each changed node, None for one
    that is gone. Not thread-safe: one replayer builds a delta."""

    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.changed_brokers: dict[int, BrokerRegistration | None] = {}
        self.changed_controllers: dict[int, ControllerRegistration | None] = {}

    def broker(self, node_id: int) -> BrokerRegistration | None:
        """The broker's registration as of the records replayed so far."""
        if node_id in self.changed_brokers:
            return self.changed_brokers[node_id]
        return self.image.broker(node_id)

    def replay(self, record: BrokerRecord) -> None:
        match record:
            case RegisterBrokerRecord():
                self.changed_brokers[record.broker_id] = BrokerRegistration.from_record(record)
            case UnregisterBrokerRecord():
                self.changed_brokers[record.broker_id] = None
            case RegisterControllerRecord():
                controller = ControllerRegistration.from_record(record)
                self.changed_controllers[record.controller_id] = controller
            case FenceBrokerRecord():
                broker = self._broker(record.id, record.epoch, "fence")
                self.changed_brokers[record.id] = broker.clone_with(fenced=True)
            case UnfenceBrokerRecord():
                broker = self._broker(record.id, record.epoch, "unfence")
                self.changed_brokers[record.id] = broker.clone_with(fenced=False)
            case BrokerRegistrationChangeRecord():
                self._replay_change(record)

    def _replay_change(self, record: BrokerRegistrationChangeRecord) -> None:
        broker = self._broker(record.broker_id, record.broker_epoch, "change")
        if record.fenced not in _FENCING_CHANGES:
            raise MetadataReplayError(
                f"Unable to replay {record}: unknown value for fenced field: {record.fenced}"
            )
        if record.in_controlled_shutdown not in _SHUTDOWN_CHANGES:
            raise MetadataReplayError(
                f"Unable to replay {record}: unknown value for inControlledShutdown field: "
                f"{record.in_controlled_shutdown}"
            )
        changed = broker.clone_with(
            fenced=_FENCING_CHANGES[record.fenced],
            in_controlled_shutdown=_SHUTDOWN_CHANGES[record.in_controlled_shutdown],
            directories=record.log_dirs or None,
        )
        if changed is not broker:
            self.changed_brokers[record.broker_id] = changed

    def _broker(self, broker_id: int, epoch: int, action: str) -> BrokerRegistration:
        """The registration a record changes, which must be of the record's epoch."""
        broker = self.broker(broker_id)
        if broker is None:
            raise MetadataReplayError(
                f"Tried to {action} broker {broker_id}, but that broker was not registered."
            )
        if broker.epoch != epoch:
            raise MetadataReplayError(
                f"Tried to {action} broker {broker_id}, but the given epoch, {epoch}, did not "
                f"match the current broker epoch, {broker.epoch}"
            )
        return broker

    def finish_snapshot(self) -> None:
        """After a snapshot's records: every node the snapshot did not name is gone."""
        for node_id in self.image.brokers:
            self.changed_brokers.setdefault(node_id, None)
        for node_id in self.image.controllers:
            self.changed_controllers.setdefault(node_id, None)

    def apply(self) -> ClusterImage:
        return ClusterImage(
            apply_changes(self.image.brokers, self.changed_brokers),
            apply_changes(self.image.controllers, self.changed_controllers),
        )
