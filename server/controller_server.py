"""A KRaft node's controller role (Kafka's ControllerServer): the QuorumController on
the node's Raft client, and the controller listeners serving the quorum's RPCs, the
brokers' lifecycle and AlterPartition, the controller's admin APIs, and the requests
brokers forward in an Envelope (KIP-590).

One dispatcher serves every controller listener, as Kafka's ControllerApis does:
ApiVersions (the Raft, controller and Envelope APIs together), the Raft RPCs to the Raft
client, Envelope unwrapped and its request handled as if its client had sent it here,
everything else to `ControllerApis`. A standby answers an Envelope with NOT_CONTROLLER,
so that the forwarding broker sends it again to the active controller.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NoReturn

from tiercel.config.broker_config import BrokerConfig, Listener
from tiercel.config.config_def import ConfigError
from tiercel.config.log_config_validator import validate_topic_configs
from tiercel.config.logging_setup import log_event
from tiercel.protocol.entities import (
    build_entity,
    decode_request_body,
    encode_response_frame,
    request_class,
    response_class,
)
from tiercel.protocol.error_responses import error_response
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.request_header import (
    API_VERSIONS_KEY,
    parse_request_header,
    peek_api,
)
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import client_host
from tiercel.server.authorizer.authorizer import Authorizer, load_authorizer
from tiercel.server.controller.acl_control_manager import AclControlManager
from tiercel.server.controller.controller_apis import CONTROLLER_API_VERSIONS, ControllerApis
from tiercel.server.controller.quorum_controller import QuorumController
from tiercel.server.controller.quorum_controller_config import QuorumControllerConfig
from tiercel.server.forwarding_manager import deserialize_principal
from tiercel.server.network.connection import Buffer, CloseConnection, Connection
from tiercel.server.network.principal_builder import KafkaPrincipal
from tiercel.server.network.socket_server import SocketServer
from tiercel.server.raft.kafka_raft_client import KafkaRaftClient
from tiercel.server.raft.raft_request_handler import handle_raft_request, is_raft_request
from tiercel.server.raft.raft_wire import RAFT_API_VERSIONS

__all__ = ["ControllerServer", "quorum_controller_config"]

_log: Final = logging.getLogger("tiercel.controller")

_ENVELOPE: Final = 58
_DESCRIBE_QUORUM: Final = 55
_ENVELOPE_VERSIONS: Final = (0, 0)


def quorum_controller_config(config: BrokerConfig, cluster_id: str) -> QuorumControllerConfig:
    """The node's keys the quorum controller runs on (Kafka's ControllerServer building
    its QuorumController)."""
    rebalance = config.auto_leader_rebalance_enable
    return QuorumControllerConfig(
        node_id=config.node_id,
        cluster_id=cluster_id,
        quorum_node_ids=frozenset(v.node_id for v in config.quorum_voters),
        session_timeout_ms=config.broker_session_timeout_ms,
        default_num_partitions=config.num_partitions,
        default_replication_factor=config.default_replication_factor,
        delete_topic_enable=config.delete_topic_enable,
        max_partitions=config.max_partitions,
        unclean_leader_election_enable=config.unclean_leader_election_enable,
        unclean_leader_election_check_interval_ms=config.unclean_leader_election_interval_ms,
        leader_imbalance_check_interval_ms=(
            config.leader_imbalance_check_interval_seconds * 1000 if rebalance else None
        ),
        max_idle_interval_ms=config.metadata_max_idle_interval_ms,
        snapshot_max_new_record_bytes=config.metadata_log_max_record_bytes_between_snapshots,
        snapshot_max_interval_ms=config.metadata_log_max_snapshot_interval_ms,
        validate_broker_configs=_validate_broker_configs,
        # KIP-405's rules judged with this node's defaults and its
        # remote.log.storage.system.enable, as Kafka's ControllerConfigurationValidator
        # calls LogConfig.validate.
        validate_topic_configs=_topic_config_validator(config),
    )


def _topic_config_validator(
    config: BrokerConfig,
) -> Callable[[Mapping[str, str], Mapping[str, str]], None]:
    def validate(new: Mapping[str, str], existing: Mapping[str, str]) -> None:
        validate_topic_configs(config, new, existing)

    return validate


def _validate_broker_configs(configs: Mapping[str, str]) -> None:
    """Dynamic broker configs are not Tiercel's yet (the operations issue): any is
    refused, as Kafka refuses a key that is not dynamically updatable."""
    if configs:
        names = ", ".join(sorted(configs))
        raise ConfigError(f"Cannot update these configs dynamically: {names}")


class ControllerServer:
    """Event-loop only. `bind` first (a port 0 listener learns its port before the
    quorum's configuration is final), then `start` once the Raft client runs."""

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config
        self.listeners: list[Listener] = [
            listener
            for listener in config.listeners
            if listener.name in config.controller_listener_names
        ]
        self._server = SocketServer(
            self.listeners,
            self._handle_frame,
            config.socket_request_max_bytes,
            config.queued_max_requests,
            config.connections_max_idle_ms,
            ssl_configs=config.ssl_configs,
        )
        self._raft: KafkaRaftClient[ApiMessageAndVersion] | None = None
        self.controller: QuorumController | None = None
        self._apis: dict[str, ControllerApis] = {}
        # The controller's own authorizer, fed from its committed ACLs (Kafka's
        # ControllerServer gives it its AclPublisher): what it knows when a request
        # comes, as of the last committed record.
        self._authorizer: Authorizer | None = load_authorizer(config)
        self._synced_acls: tuple[AclControlManager, int] | None = None

    async def bind(self) -> Mapping[str, int]:
        """Listen on the controller listeners; their bound ports by listener name."""
        await self._server.start()
        return dict(self._server.bound_ports)

    def start(
        self,
        cluster_id: str,
        raft: KafkaRaftClient[ApiMessageAndVersion],
        bootstrap_records: Sequence[ApiMessageAndVersion],
    ) -> QuorumController:
        controller = QuorumController(
            quorum_controller_config(self._config, cluster_id), raft, bootstrap_records
        )
        controller.start()
        self._raft = raft
        self.controller = controller
        self._apis = {
            name: ControllerApis(controller, name, self._authorizer)
            for name in self._server.bound_ports
        }
        return controller

    async def shutdown(self) -> None:
        await self._server.shutdown()
        if self.controller is not None:
            await self.controller.close()

    async def _handle_frame(
        self, connection: Connection, frame: bytes | memoryview
    ) -> Sequence[Buffer] | None:
        raft, apis = self._raft, self._apis.get(connection.listener_name)
        if raft is None or apis is None:
            raise CloseConnection()  # not started: the peer backs off and tries again
        try:
            api_key, api_version, correlation_id = peek_api(frame)
        except Exception as e:
            _close(connection, f"invalid request header: {e}")
        if api_key == API_VERSIONS_KEY:
            return await self._api_versions(apis, api_version, correlation_id)
        request = _decode(connection, frame, api_key, api_version)
        self._sync_authorizer()
        if is_raft_request(api_key, api_version):
            if not self._may(connection.principal, connection.client_address, api_key):
                refused = error_response(api_key, request, ErrorCode.cluster_authorization_failed)
                return _encode(api_key, api_version, correlation_id, refused)
            response = await handle_raft_request(
                raft, api_key, api_version, correlation_id, request, connection.listener_name
            )
            return _encode(api_key, api_version, correlation_id, response)
        if api_key == _ENVELOPE and api_version == 0:
            envelope = await self._envelope(connection, apis, request)
            return _encode(api_key, api_version, correlation_id, envelope)
        if not _served(CONTROLLER_API_VERSIONS, api_key, api_version):
            _close(connection, f"unsupported api {api_key} v{api_version}")
        values = await apis.handle(
            api_key, api_version, request, connection.principal, connection.client_address
        )
        return _encode(api_key, api_version, correlation_id, values)

    def _sync_authorizer(self) -> None:
        """Hands the authorizer the committed ACLs when they changed since it last
        had them (a replay bumps the manager's version; a snapshot load replaces it)."""
        authorizer, controller = self._authorizer, self.controller
        if authorizer is None or controller is None:
            return
        acls = controller.committed_state.acls
        synced = self._synced_acls
        if synced is None or synced[0] is not acls or synced[1] != acls.version:
            authorizer.update_acls(dict(acls.id_to_acl))
            self._synced_acls = (acls, acls.version)

    def _may(self, principal: KafkaPrincipal, client_address: str, api_key: int) -> bool:
        """The Raft RPCs and Envelope need CLUSTER_ACTION, DescribeQuorum DESCRIBE, on
        the cluster (Kafka's ControllerApis.handleRaftRequest, handleEnvelopeRequest,
        handleDescribeQuorum)."""
        if self._authorizer is None:
            return True
        operation = (
            AclOperation.DESCRIBE if api_key == _DESCRIBE_QUORUM else AclOperation.CLUSTER_ACTION
        )
        return self._authorizer.authorize(
            str(principal),
            client_host(client_address),
            operation,
            ResourceType.CLUSTER,
            CLUSTER_NAME,
        )

    async def _api_versions(
        self, apis: ControllerApis, api_version: int, correlation_id: int
    ) -> list[Buffer]:
        """The controller's answer with the Raft RPCs and Envelope added to its APIs;
        an unknown version answered in v0 with UNSUPPORTED_VERSION (KIP-511)."""
        low, high = CONTROLLER_API_VERSIONS[API_VERSIONS_KEY]
        version = api_version if low <= api_version <= high else 0
        values = await apis.handle(API_VERSIONS_KEY, version, None)
        versions = {**CONTROLLER_API_VERSIONS, **RAFT_API_VERSIONS, _ENVELOPE: _ENVELOPE_VERSIONS}
        values["api_keys"] = [
            {"api_key": key, "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(versions.items())
        ]
        if version != api_version:
            values["error_code"] = ErrorCode.unsupported_version
        return _encode(API_VERSIONS_KEY, version, correlation_id, values)

    async def _envelope(
        self, connection: Connection, apis: ControllerApis, envelope: Any
    ) -> Mapping[str, Any]:
        """Kafka's ControllerApis.handleEnvelopeRequest: the inner request handled, its
        response (header and all, under the client's correlation id) sent back."""
        controller = self.controller
        if controller is None or not controller.is_active:
            return {"error_code": ErrorCode.not_controller, "response_data": None}
        if not self._may(connection.principal, connection.client_address, _ENVELOPE):
            return {"error_code": ErrorCode.cluster_authorization_failed, "response_data": None}
        inner = envelope.request_data
        try:
            api_key, api_version, correlation_id = peek_api(inner)
            principal = KafkaPrincipal(*deserialize_principal(envelope.request_principal))
        except Exception:
            # Kafka's EnvelopeUtils: an unreadable principal is PrincipalDeserialization-
            # Exception, answered as INVALID_REQUEST.
            return {"error_code": ErrorCode.invalid_request, "response_data": None}
        client_address = _client_address(envelope.client_host_address)
        raft_request = api_key == _DESCRIBE_QUORUM and is_raft_request(api_key, api_version)
        if not raft_request and not _served(CONTROLLER_API_VERSIONS, api_key, api_version):
            return {"error_code": ErrorCode.unsupported_version, "response_data": None}
        request = _decode(connection, inner, api_key, api_version)
        if raft_request and not self._may(principal, client_address, api_key):
            values: Any = error_response(api_key, request, ErrorCode.cluster_authorization_failed)
        elif raft_request:
            # Kafka's ControllerApis.handleDescribeQuorumRequest: the Raft client answers.
            assert self._raft is not None
            values = await handle_raft_request(
                self._raft, api_key, api_version, correlation_id, request, connection.listener_name
            )
        else:
            values = await apis.handle(api_key, api_version, request, principal, client_address)
        response = b"".join(bytes(b) for b in _encode(api_key, api_version, correlation_id, values))
        return {"error_code": ErrorCode.none, "response_data": response[4:]}


def _client_address(packed: bytes) -> str:
    """The Envelope's client address as a connection's "host:port" (port unknown: 0);
    empty when it carries none."""
    try:
        return f"{ipaddress.ip_address(packed)}:0"
    except ValueError:
        return ""


def _served(versions: Mapping[int, tuple[int, int]], api_key: int, api_version: int) -> bool:
    served = versions.get(api_key)
    return served is not None and served[0] <= api_version <= served[1]


def _decode(
    connection: Connection, frame: bytes | memoryview, api_key: int, api_version: int
) -> Any:
    try:
        request_type = request_class(api_key, api_version)
        header = parse_request_header(frame, request_type.__flexible__)
        return decode_request_body(request_type, frame, header.size)
    except Exception as e:  # kio's native reader has several exception types
        _close(connection, f"invalid request {api_key} v{api_version}: {type(e).__name__}: {e}")


def _encode(api_key: int, api_version: int, correlation_id: int, values: Any) -> list[Buffer]:
    """The response frame of ``values`` (response fields, or an entity already built)."""
    if isinstance(values, Mapping):
        values = build_entity(response_class(api_key, api_version), values, True)
    return encode_response_frame(correlation_id, values)


def _close(connection: Connection, reason: str) -> NoReturn:
    log_event(
        _log,
        logging.WARNING,
        "controller_connection_closed",
        client=connection.client_address,
        reason=reason,
    )
    raise CloseConnection()
