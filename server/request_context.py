"""What a handler gets besides the request body: who asked, and the broker's services."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from protocol.request_header import RequestHeader

if TYPE_CHECKING:
    from config.broker_config import BrokerConfig
    from server.admin_manager import AdminManager
    from server.controller.controller import Controller
    from server.coordinator.group.group_coordinator import GroupCoordinator
    from server.coordinator.transaction.producer_id_manager import ProducerIdManager
    from server.metadata.metadata_cache import MetadataCache
    from server.replica_manager import ReplicaManager
    from storage.log_manager import LogManager
    from storage.scheduler import Scheduler


@dataclass(slots=True)
class BrokerServices:
    """The components handlers call into; built once by `BrokerServer`."""

    config: BrokerConfig
    node_id: int
    cluster_id: str
    metadata_cache: MetadataCache
    replica_manager: ReplicaManager
    log_manager: LogManager
    admin_manager: AdminManager
    scheduler: Scheduler
    group_coordinator: GroupCoordinator
    producer_id_manager: ProducerIdManager
    controller: Controller
    """Serves the controller's admin APIs while this broker is the active controller."""
    api_versions: list[tuple[int, int, int]] = field(default_factory=list)
    """(api_key, min, max) as ApiVersions advertises them; set by KafkaApis."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    client_address: str
    listener_name: str
    broker: BrokerServices

    @property
    def api_version(self) -> int:
        return self.header.api_version

    def describe(self) -> dict[str, object]:
        """Fields identifying the request in log lines."""
        return {
            "client": self.client_address,
            "client_id": self.header.client_id,
            "api_key": self.header.api_key,
            "api_version": self.header.api_version,
            "correlation_id": self.header.correlation_id,
        }
