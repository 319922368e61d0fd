"""Broker registrations (Kafka's ``ClusterControlManager``): RegisterBrokerRecord,
UnregisterBrokerRecord, Fence/UnfenceBrokerRecord and BrokerRegistrationChangeRecord
replayed into one registration per broker id.

A registration's epoch is the offset its RegisterBrokerRecord is written at (Kafka's
QuorumController passes ``offsetControl.nextWriteOffset()``), so a new incarnation of a
broker always gets a larger epoch than the last. A broker that registers again with the
same incarnation id (a retried request) keeps its epoch and state; another incarnation
is refused while the registered one still has a live session
(DUPLICATE_BROKER_REGISTRATION), as Kafka refuses it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from tiercel.protocol.errors import UnsupportedVersionError
from tiercel.protocol.metadata.broker_records import (
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
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.metadata_version import FEATURE_NAME, MINIMUM_VERSION
from tiercel.server.controller.broker_heartbeat_manager import (
    BrokerControlState,
    BrokerHeartbeatManager,
)
from tiercel.server.controller.broker_registration import (
    BrokerRegistration,
    BrokerRegistrationRequest,
    is_reserved_directory,
)
from tiercel.server.controller.controller_exceptions import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    InconsistentClusterIdError,
    InvalidRegistrationError,
    StaleBrokerEpochError,
)
from tiercel.server.controller.controller_result import ControllerResult
from tiercel.server.controller.feature_control_manager import (
    FeatureControlManager,
    FinalizedControllerFeatures,
)
from tiercel.server.metadata.image.broker_registration import VersionRange
from tiercel.server.raft.timer import Time

__all__ = ["ClusterControlManager"]

# BrokerRegistrationChangeRecord's Fenced and InControlledShutdown values (Kafka's
# BrokerRegistrationFencingChange and BrokerRegistrationInControlledShutdownChange).
FENCE: Final = 1
UNFENCE: Final = -1
IN_CONTROLLED_SHUTDOWN: Final = 1


class ClusterControlManager:
    """Event-loop only. The heartbeat manager exists only while this controller is
    active (`activate`/`deactivate`)."""

    def __init__(
        self,
        cluster_id: str,
        time: Time,
        session_timeout_ms: int,
        feature_control: FeatureControlManager | None = None,
    ) -> None:
        self.cluster_id = cluster_id
        self._time = time
        self._session_timeout_ms = session_timeout_ms
        self._feature_control = feature_control
        self._registrations: dict[int, BrokerRegistration] = {}
        self._register_broker_record_offsets: dict[int, int] = {}
        self._controller_registrations: dict[int, RegisterControllerRecord] = {}
        self.heartbeat_manager: BrokerHeartbeatManager | None = None
        # Records that take a broker restarted without a clean shutdown out of every ISR
        # (Kafka's BrokerUncleanShutdownHandler, ReplicationControlManager's).
        self.broker_unclean_shutdown_handler: Callable[[int, list[ApiMessageAndVersion]], None] = (
            lambda broker_id, records: None
        )

    def set_feature_control(self, feature_control: FeatureControlManager) -> None:
        self._feature_control = feature_control

    @property
    def feature_control(self) -> FeatureControlManager:
        assert self._feature_control is not None
        return self._feature_control

    @property
    def broker_registrations(self) -> Mapping[int, BrokerRegistration]:
        return self._registrations

    def registration(self, broker_id: int) -> BrokerRegistration | None:
        return self._registrations.get(broker_id)

    def is_active(self, broker_id: int) -> bool:
        registration = self._registrations.get(broker_id)
        return registration is not None and registration.is_active

    def has_online_dir(self, broker_id: int, directory: uuid.UUID) -> bool:
        """Kafka's ``hasOnlineDir``: False for a broker that is not registered."""
        registration = self._registrations.get(broker_id)
        return registration is not None and registration.has_online_dir(directory)

    def is_unfenced(self, broker_id: int) -> bool:
        registration = self._registrations.get(broker_id)
        return registration is not None and not registration.fenced

    def brokers_supported(self) -> Iterator[tuple[int, Mapping[str, VersionRange]]]:
        for broker_id, registration in self._registrations.items():
            yield broker_id, registration.supported_features

    def activate(self) -> None:
        """Every registered broker gets a full session (Kafka's ``activate``)."""
        self.heartbeat_manager = BrokerHeartbeatManager(self._time, self._session_timeout_ms)
        for broker_id in self._registrations:
            self.heartbeat_manager.register(broker_id)

    def deactivate(self) -> None:
        self.heartbeat_manager = None

    def _heartbeats(self) -> BrokerHeartbeatManager:
        if self.heartbeat_manager is None:
            raise RuntimeError("ClusterControlManager is not active.")
        return self.heartbeat_manager

    def register_broker(
        self,
        request: BrokerRegistrationRequest,
        new_broker_epoch: int,
        finalized: FinalizedControllerFeatures,
    ) -> ControllerResult[int]:
        """Kafka's ``registerBroker``; the reply is the broker epoch."""
        heartbeats = self._heartbeats()
        existing = self._validate_registration(request, heartbeats)
        version = self.feature_control.metadata_version
        features = _checked_features(request, finalized)
        records: list[ApiMessageAndVersion] = []
        if existing is not None and request.incarnation_id == existing.incarnation_id:
            # The same incarnation again (a retried request): amended, epoch and state kept.
            epoch, fenced, shutting = (
                existing.epoch,
                existing.fenced,
                existing.in_controlled_shutdown,
            )
        else:
            epoch, fenced, shutting = new_broker_epoch, True, False
            self.broker_unclean_shutdown_handler(request.broker_id, records)
            heartbeats.remove(request.broker_id)
        record = RegisterBrokerRecord(
            broker_id=request.broker_id,
            incarnation_id=request.incarnation_id,
            broker_epoch=epoch,
            end_points=request.listeners,
            features=tuple(
                BrokerFeature(name=n, min_supported_version=r.min, max_supported_version=r.max)
                for n, r in sorted(features.items())
            ),
            rack=request.rack,
            fenced=fenced,
            in_controlled_shutdown=shutting,
            log_dirs=request.log_dirs if version.is_directory_assignment_supported() else (),
        )
        heartbeats.register(request.broker_id)
        records.append(ApiMessageAndVersion(record, version.register_broker_record_version()))
        return ControllerResult(records, record.broker_epoch)

    def _validate_registration(
        self, request: BrokerRegistrationRequest, heartbeats: BrokerHeartbeatManager
    ) -> BrokerRegistration | None:
        """The broker's current registration, after Kafka's refusals."""
        if request.cluster_id != self.cluster_id:
            raise InconsistentClusterIdError(
                f"Expected cluster ID {self.cluster_id}, but got cluster ID {request.cluster_id}"
            )
        existing = self._registrations.get(request.broker_id)
        # A fenced broker has no session to protect (Kafka's
        # BrokerHeartbeatManager.hasValidSession): a broker that stopped after its
        # controlled shutdown, or was fenced, starts again at once.
        if (
            existing is not None
            and not existing.fenced
            and heartbeats.has_valid_session(request.broker_id)
            and request.incarnation_id != existing.incarnation_id
        ):
            raise DuplicateBrokerRegistrationError(
                "Another broker is registered with that broker id."
            )
        if request.is_migrating_zk_broker:
            raise BrokerIdNotRegisteredError("Controller does not support registering ZK brokers.")
        if self.feature_control.metadata_version.is_directory_assignment_supported():
            self._check_log_dirs(request)
        return existing

    def _check_log_dirs(self, request: BrokerRegistrationRequest) -> None:
        if not request.log_dirs:
            raise InvalidRegistrationError("No directories specified in request")
        if any(is_reserved_directory(d) for d in request.log_dirs):
            raise InvalidRegistrationError("Reserved directory ID in request")
        if len(set(request.log_dirs)) != len(request.log_dirs):
            raise InvalidRegistrationError("Duplicate directory ID in request")
        for other in self._registrations.values():
            if other.id == request.broker_id:
                continue
            for directory in request.log_dirs:
                if directory in other.log_dirs:
                    raise InvalidRegistrationError(
                        f"Broker {other.id} is already registered with directory {directory}"
                    )

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        """Kafka's ``checkBrokerEpoch``: the registration, or STALE_BROKER_EPOCH."""
        registration = self._registrations.get(broker_id)
        if registration is None:
            raise StaleBrokerEpochError(f"No broker registration found for broker id {broker_id}")
        if registration.epoch != broker_epoch:
            raise StaleBrokerEpochError(
                f"Expected broker epoch {registration.epoch}, but got broker epoch {broker_epoch}"
            )
        return registration

    def current_broker_state(self, broker_id: int) -> BrokerControlState:
        registration = self._registrations[broker_id]
        if registration.fenced:
            return BrokerControlState.FENCED
        if registration.in_controlled_shutdown:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.UNFENCED

    def fence_record(self, broker_id: int) -> ApiMessageAndVersion:
        return self._change_record(broker_id, 0, fenced=FENCE)

    def unfence_record(self, broker_id: int) -> ApiMessageAndVersion:
        return self._change_record(broker_id, 0, fenced=UNFENCE)

    def controlled_shutdown_record(self, broker_id: int) -> ApiMessageAndVersion:
        return self._change_record(broker_id, 1, in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN)

    def log_dirs_record(
        self, broker_id: int, online_dirs: tuple[uuid.UUID, ...]
    ) -> ApiMessageAndVersion:
        """The broker's directories still online after some failed (KIP-858; Kafka's
        ``handleDirectoriesOffline`` writes it)."""
        return self._change_record(broker_id, 2, log_dirs=online_dirs)

    def _change_record(
        self,
        broker_id: int,
        version: int,
        fenced: int = 0,
        in_controlled_shutdown: int = 0,
        log_dirs: tuple[uuid.UUID, ...] = (),
    ) -> ApiMessageAndVersion:
        # Every metadata.version from 3.3-IV2 writes BrokerRegistrationChangeRecord, not
        # Fence/UnfenceBrokerRecord: v0 for fencing, v1 for InControlledShutdown, v2 for
        # LogDirs, as Kafka's ReplicationControlManager writes them.
        registration = self._registrations[broker_id]
        record = BrokerRegistrationChangeRecord(
            broker_id=broker_id,
            broker_epoch=registration.epoch,
            fenced=fenced,
            in_controlled_shutdown=in_controlled_shutdown,
            log_dirs=log_dirs,
        )
        return ApiMessageAndVersion(record, version)

    def unregister_record(self, broker_id: int) -> ApiMessageAndVersion:
        registration = self._registrations.get(broker_id)
        if registration is None:
            raise BrokerIdNotRegisteredError(f"Broker ID {broker_id} is not currently registered")
        record = UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=registration.epoch)
        return ApiMessageAndVersion(record, 0)

    def register_broker_record_offset(self, broker_id: int) -> int:
        """The offset of the broker's latest RegisterBrokerRecord, which its metadata must
        reach before it is unfenced (Kafka's ``registerBrokerRecordOffset``)."""
        return self._register_broker_record_offsets[broker_id]

    def replay_register(self, record: RegisterBrokerRecord, offset: int) -> None:
        self._registrations[record.broker_id] = BrokerRegistration.from_record(record)
        self._register_broker_record_offsets[record.broker_id] = offset
        if self.heartbeat_manager is not None:
            self.heartbeat_manager.register(record.broker_id)

    def replay_unregister(self, record: UnregisterBrokerRecord) -> None:
        registration = self._registrations.get(record.broker_id)
        if registration is None or registration.epoch != record.broker_epoch:
            raise RuntimeError(
                f"Unable to replay {record}: no registration of broker {record.broker_id} "
                f"with epoch {record.broker_epoch}"
            )
        del self._registrations[record.broker_id]
        del self._register_broker_record_offsets[record.broker_id]
        if self.heartbeat_manager is not None:
            self.heartbeat_manager.remove(record.broker_id)

    def replay_fence(self, record: FenceBrokerRecord) -> None:
        self._replay_change(record.id, record.epoch, fenced=True, in_controlled_shutdown=None)

    def replay_unfence(self, record: UnfenceBrokerRecord) -> None:
        self._replay_change(record.id, record.epoch, fenced=False, in_controlled_shutdown=None)

    def replay_change(self, record: BrokerRegistrationChangeRecord) -> None:
        fenced = {FENCE: True, UNFENCE: False}.get(record.fenced)
        shutting = True if record.in_controlled_shutdown == IN_CONTROLLED_SHUTDOWN else None
        # No directories (v0, v1, or none left online) changes none, as Kafka replays it.
        log_dirs = record.log_dirs or None
        self._replay_change(record.broker_id, record.broker_epoch, fenced, shutting, log_dirs)

    def _replay_change(
        self,
        broker_id: int,
        epoch: int,
        fenced: bool | None,
        in_controlled_shutdown: bool | None,
        log_dirs: tuple[uuid.UUID, ...] | None = None,
    ) -> None:
        registration = self._registrations.get(broker_id)
        if registration is None or registration.epoch != epoch:
            raise RuntimeError(
                f"Unable to replay a change of broker {broker_id}: no registration with "
                f"epoch {epoch}"
            )
        self._registrations[broker_id] = registration.cloned_with(
            fenced, in_controlled_shutdown, log_dirs
        )

    @property
    def controller_registrations(self) -> Mapping[int, RegisterControllerRecord]:
        return self._controller_registrations

    def register_controller(
        self,
        controller_id: int,
        incarnation_id: uuid.UUID,
        listeners: tuple[ControllerEndpoint, ...],
        features: Mapping[str, VersionRange],
        zk_migration_ready: bool = False,
    ) -> ControllerResult[None]:
        """Kafka's ``registerController`` (KIP-919): how brokers and tools reach a
        controller, from metadata.version 3.7-IV0."""
        if not self.feature_control.metadata_version.is_controller_registration_supported():
            raise UnsupportedVersionError(
                "The current MetadataVersion is too old to support controller registrations."
            )
        record = RegisterControllerRecord(
            controller_id=controller_id,
            incarnation_id=incarnation_id,
            zk_migration_ready=zk_migration_ready,
            end_points=listeners,
            features=tuple(
                ControllerFeature(name=n, min_supported_version=r.min, max_supported_version=r.max)
                for n, r in sorted(features.items())
            ),
        )
        return ControllerResult([ApiMessageAndVersion(record, 0)], None)

    def replay_register_controller(self, record: RegisterControllerRecord) -> None:
        self._controller_registrations[record.controller_id] = record

    def records(self) -> Iterator[ApiMessageAndVersion]:
        version = self.feature_control.metadata_version
        for broker_id in sorted(self._registrations):
            yield self._registrations[broker_id].to_record(version)
        if version.is_controller_registration_supported():
            for controller_id in sorted(self._controller_registrations):
                yield ApiMessageAndVersion(self._controller_registrations[controller_id], 0)


def _checked_features(
    request: BrokerRegistrationRequest, finalized: FinalizedControllerFeatures
) -> dict[str, VersionRange]:
    """The broker's supported features, every finalized level among them (Kafka's
    ``processRegistrationFeature``); a broker that names no metadata.version range
    supports only the first KRaft one."""
    features = dict(request.features)
    features.setdefault(
        FEATURE_NAME, VersionRange(MINIMUM_VERSION.feature_level, MINIMUM_VERSION.feature_level)
    )
    for name, level in finalized.levels.items():
        _check_feature(name, level, features.get(name, VersionRange(0, 0)))
    return features


def _check_feature(name: str, finalized: int, supported: VersionRange) -> None:
    # Kafka's processRegistrationFeature: every finalized level must be in the broker's
    # range; a feature at level 0 (disabled) needs no support.
    if finalized != 0 and not supported.contains(finalized):
        raise UnsupportedVersionError(
            f"Unable to register because the broker does not support finalized version "
            f"{finalized} of {name}. The broker wants a version between {supported.min} and "
            f"{supported.max}, inclusive."
        )
