"""What a handler gets besides the request body: who asked, and the broker's services."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tiercel.protocol.errors import NotControllerError
from tiercel.protocol.request_header import RequestHeader
from tiercel.server.network.credential_cache import CredentialCache
from tiercel.server.network.principal_builder import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from tiercel.config.broker_config import BrokerConfig
    from tiercel.server.admin_manager import AdminManager
    from tiercel.server.authorizer.authorizer import Authorizer
    from tiercel.server.controller.controller import Controller
    from tiercel.server.coordinator.group.group_coordinator import GroupCoordinator
    from tiercel.server.coordinator.transaction.producer_id_manager import ProducerIdManager
    from tiercel.server.coordinator.transaction.rpc_producer_id_manager import (
        RpcProducerIdManager,
    )
    from tiercel.server.coordinator.transaction.transaction_coordinator import (
        TransactionCoordinator,
    )
    from tiercel.server.forwarding_manager import ForwardingManager
    from tiercel.server.metadata.metadata_cache import MetadataCache
    from tiercel.server.replica_manager import ReplicaManager
    from tiercel.storage.log_manager import LogManager
    from tiercel.storage.scheduler import Scheduler


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
    producer_id_manager: ProducerIdManager | RpcProducerIdManager
    transaction_coordinator: TransactionCoordinator
    controller: Controller | None
    """Serves the controller's admin APIs while this broker is the active controller;
    None on a KRaft broker, which forwards them to the quorum's (`forwarding_manager`)."""
    api_versions: list[tuple[int, int, int]] = field(default_factory=list)
    """(api_key, min, max) as ApiVersions advertises them; set by KafkaApis."""
    forwarding_manager: ForwardingManager | None = None
    """In KRaft mode: sends the controller's APIs (`forwarding_manager.FORWARDED_APIS`)
    to the active controller instead of their handlers here."""
    credential_cache: CredentialCache = field(default_factory=CredentialCache)
    """The SCRAM credentials of the metadata image (empty without process.roles)."""
    authorizer: Authorizer | None = None
    """`authorizer.class.name`'s, None without one (`server/authorizer/auth_helper`)."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    client_address: str
    listener_name: str
    broker: BrokerServices
    principal: KafkaPrincipal = ANONYMOUS
    """The connection's (Kafka's RequestContext.principal): from SASL or the client's
    certificate, User:ANONYMOUS otherwise."""

    @property
    def authorizer(self) -> Authorizer | None:
        return self.broker.authorizer

    @property
    def controller(self) -> Controller:
        """The ZooKeeper-era controller, for the admin APIs a KRaft broker forwards
        instead of handling (so they never get here on one)."""
        controller = self.broker.controller
        if controller is None:
            raise NotControllerError("this broker forwards the request to the controller")
        return controller

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
