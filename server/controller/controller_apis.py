"""The requests a controller listener answers (Kafka's ``ControllerApis``): the brokers'
lifecycle (BrokerRegistration, BrokerHeartbeat, UnregisterBroker), AlterPartition,
AssignReplicasToDirs (KIP-858), AllocateProducerIds, UpdateFeatures,
ControllerRegistration, DescribeCluster (KIP-919: the controllers) and ApiVersions here,
the admin requests in `controller_admin_apis`.

`handle` takes a request decoded by kio and returns the response's fields as nested
mappings, as ``server/handlers`` do, so the network layer that serves a controller
listener builds and encodes it the same way. A standby answers every request but
ApiVersions with NOT_CONTROLLER (brokers and clients then find the active controller),
and any other error with its code, as Kafka's ``ControllerApis`` does through
``handleError``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from tiercel.protocol.error_responses import api_error_message, error_response
from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.protocol.metadata.broker_records import BrokerEndpoint, ControllerEndpoint
from tiercel.server.authorizer.acl import AclOperation
from tiercel.server.authorizer.auth_helper import authorize_cluster_operation
from tiercel.server.authorizer.authorizer import Authorizer
from tiercel.server.controller import controller_acl_apis as acl_apis
from tiercel.server.controller import controller_admin_apis as admin
from tiercel.server.controller.broker_registration import BrokerRegistrationRequest
from tiercel.server.controller.controller_request_context import ControllerRequestContext
from tiercel.server.controller.controller_requests import (
    AlterPartitionData,
    BrokerHeartbeatRequest,
    DirectoryAssignment,
)
from tiercel.server.controller.feature_control_manager import UpgradeType
from tiercel.server.controller.quorum_controller import QuorumController
from tiercel.server.metadata.image.broker_registration import VersionRange
from tiercel.server.network.principal_builder import KafkaPrincipal

__all__ = ["CONTROLLER_API_VERSIONS", "ControllerApis"]

_log = logging.getLogger(__name__)

Handler = Callable[[ControllerRequestContext, int, Any], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class _Api:
    min_version: int
    max_version: int
    handler: Handler


async def _broker_registration(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    registration = BrokerRegistrationRequest(
        broker_id=request.broker_id,
        cluster_id=request.cluster_id,
        incarnation_id=request.incarnation_id,
        listeners=tuple(
            BrokerEndpoint(
                name=listener.name,
                host=listener.host,
                port=listener.port,
                security_protocol=listener.security_protocol,
            )
            for listener in request.listeners
        ),
        features={
            f.name: VersionRange(f.min_supported_version, f.max_supported_version)
            for f in request.features
        },
        rack=request.rack,
        is_migrating_zk_broker=request.is_migrating_zk_broker,
        log_dirs=tuple(d for d in request.log_dirs if d is not None),
    )
    epoch = await controller.register_broker(registration)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "broker_epoch": epoch}


async def _broker_heartbeat(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    reply = await controller.process_broker_heartbeat(
        BrokerHeartbeatRequest(
            broker_id=request.broker_id,
            broker_epoch=request.broker_epoch,
            current_metadata_offset=request.current_metadata_offset,
            want_fence=request.want_fence,
            want_shut_down=request.want_shut_down,
            offline_log_dirs=(
                tuple(d for d in request.offline_log_dirs if d is not None) if version >= 1 else ()
            ),
        )
    )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "is_caught_up": reply.is_caught_up,
        "is_fenced": reply.is_fenced,
        "should_shut_down": reply.should_shut_down,
    }


async def _assign_replicas_to_dirs(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    directories = [
        DirectoryAssignment(
            d.id_,
            tuple((t.topic_id, tuple(p.partition_index for p in t.partitions)) for t in d.topics),
        )
        for d in request.directories
    ]
    results = await context.controller.assign_replicas_to_dirs(
        request.broker_id, request.broker_epoch, directories
    )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "directories": [
            {
                "id_": directory,
                "topics": [
                    {
                        "topic_id": topic_id,
                        "partitions": [
                            {
                                "partition_index": p,
                                "error_code": error.error_code if error else ErrorCode.none,
                            }
                            for p, error in partitions
                        ],
                    }
                    for topic_id, partitions in topics
                ],
            }
            for directory, topics in results
        ],
    }


async def _unregister_broker(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    await controller.unregister_broker(request.broker_id)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None}


async def _allocate_producer_ids(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    block = await controller.allocate_producer_ids(request.broker_id, request.broker_epoch)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "producer_id_start": block.first_producer_id,
        "producer_id_len": block.size,
    }


async def _alter_partition(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    topics = [
        (
            t.topic_id,
            "",
            [
                AlterPartitionData(
                    partition_index=p.partition_index,
                    leader_epoch=p.leader_epoch,
                    # v2's ISR has no epochs (Kafka's newIsrToSimpleNewIsrWithBrokerEpochs).
                    new_isr=tuple(
                        (b.broker_id, b.broker_epoch) if version >= 3 else (b, -1)
                        for b in (p.new_isr_with_epochs if version >= 3 else p.new_isr)
                    ),
                    partition_epoch=p.partition_epoch,
                    leader_recovery_state=p.leader_recovery_state,
                )
                for p in t.partitions
            ],
        )
        for t in request.topics
    ]
    results = await controller.alter_partition(
        request.broker_id, request.broker_epoch, topics, version
    )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "topics": [
            {
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition_index": r.partition_index,
                        "error_code": r.error.error_code if r.error else ErrorCode.none,
                        "leader_id": r.leader_id,
                        "leader_epoch": r.leader_epoch,
                        "isr": r.isr,
                        "leader_recovery_state": r.leader_recovery_state,
                        "partition_epoch": r.partition_epoch,
                    }
                    for r in partitions
                ],
            }
            for topic_id, _, partitions in results
        ],
    }


async def _update_features(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    updates = {u.feature: u.max_version_level for u in request.feature_updates}
    upgrade_types = {
        u.feature: (
            UpgradeType(u.upgrade_type)
            if version >= 1
            else (UpgradeType.SAFE_DOWNGRADE if u.allow_downgrade else UpgradeType.UPGRADE)
        )
        for u in request.feature_updates
    }
    error: KafkaError | None = None
    try:
        # ValidateOnly is v1+.
        validate_only = version >= 1 and request.validate_only
        await controller.update_features(updates, upgrade_types, validate_only)
    except KafkaError as e:
        if e.error_code == ErrorCode.not_controller:
            raise
        error = e
    fields = admin.error_fields(error)
    # v0-1 answer per feature too; v2 only at the top (KIP-1022).
    results = [{"feature": name, **fields} for name in updates] if version < 2 else []
    return {"throttle_time": 0, **fields, "results": results}


async def _api_versions(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    finalized = await controller.finalized_features()
    return {
        "error_code": ErrorCode.none,
        "api_keys": [
            {"api_key": key, "min_version": api.min_version, "max_version": api.max_version}
            for key, api in sorted(_APIS.items())
        ],
        "throttle_time": 0,
        "supported_features": [
            {"name": name, "min_version": r.min, "max_version": r.max}
            for name, r in sorted(controller.config.supported_features.items())
        ],
        "finalized_features_epoch": finalized.epoch,
        "finalized_features": [
            {"name": name, "max_version_level": level, "min_version_level": level}
            for name, level in sorted(finalized.levels.items())
        ],
    }


async def _controller_registration(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    await context.controller.register_controller(
        request.controller_id,
        request.incarnation_id,
        tuple(
            ControllerEndpoint(
                name=listener.name,
                host=listener.host,
                port=listener.port,
                security_protocol=listener.security_protocol,
            )
            for listener in request.listeners
        ),
        {
            f.name: VersionRange(f.min_supported_version, f.max_supported_version)
            for f in request.features
        },
    )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None}


# DescribeCluster's EndpointType (KIP-919).
_BROKER_ENDPOINTS: Final = 1
_CONTROLLER_ENDPOINTS: Final = 2


async def _describe_cluster(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    """The registered controllers reachable on this listener (Kafka's
    ``ControllerApis.handleDescribeCluster`` and ``computeDescribeClusterResponse``)."""
    endpoint_type = request.endpoint_type if version >= 1 else _BROKER_ENDPOINTS
    if endpoint_type not in (_BROKER_ENDPOINTS, _CONTROLLER_ENDPOINTS):
        error = ErrorCode.invalid_request if version == 0 else ErrorCode.unsupported_endpoint_type
        return {"throttle_time": 0, "error_code": error, "error_message": None}
    if endpoint_type != _CONTROLLER_ENDPOINTS:
        error = ErrorCode.invalid_request if version == 0 else ErrorCode.mismatched_endpoint_type
        return {"throttle_time": 0, "error_code": error, "error_message": None}
    controller = context.controller
    registrations = await controller.controller_registrations()
    nodes = [
        {"broker_id": node_id, "host": e.host, "port": e.port, "rack": None, "is_fenced": False}
        for node_id, r in sorted(registrations.items())
        for e in r.end_points
        if e.name == context.listener_name
    ]
    leader = controller.leader_and_epoch.leader_id
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": _CONTROLLER_ENDPOINTS,
        "cluster_id": controller.config.cluster_id,
        "controller_id": -1 if leader is None else leader,
        "brokers": nodes,
        "cluster_authorized_operations": -(2**31),
    }


# Kafka 4.0's versions, within what kio decodes (AlterPartition from v2).
_APIS: Final[Mapping[int, _Api]] = {
    18: _Api(0, 4, _api_versions),
    19: _Api(2, 7, admin.create_topics),
    20: _Api(1, 6, admin.delete_topics),
    29: _Api(1, 3, acl_apis.describe_acls),
    30: _Api(1, 3, acl_apis.create_acls),
    31: _Api(1, 3, acl_apis.delete_acls),
    33: _Api(0, 2, admin.alter_configs),
    37: _Api(0, 3, admin.create_partitions),
    43: _Api(0, 2, admin.elect_leaders),
    44: _Api(0, 1, admin.incremental_alter_configs),
    45: _Api(0, 0, admin.alter_partition_reassignments),
    46: _Api(0, 0, admin.list_partition_reassignments),
    51: _Api(0, 0, admin.alter_user_scram_credentials),
    56: _Api(2, 3, _alter_partition),
    57: _Api(0, 2, _update_features),
    60: _Api(0, 2, _describe_cluster),
    62: _Api(0, 4, _broker_registration),
    63: _Api(0, 1, _broker_heartbeat),
    64: _Api(0, 0, _unregister_broker),
    67: _Api(0, 0, _allocate_producer_ids),
    70: _Api(0, 0, _controller_registration),
    73: _Api(0, 0, _assign_replicas_to_dirs),
}
# The cluster operation each API needs before anything else, as Kafka's ControllerApis
# calls authorizeClusterOperation (DescribeCluster needs ALTER on a controller, unlike
# on a broker). The admin APIs authorize per topic or resource themselves.
_CLUSTER_OPERATION: Final[Mapping[int, AclOperation]] = {
    43: AclOperation.ALTER,
    45: AclOperation.ALTER,
    46: AclOperation.DESCRIBE,
    51: AclOperation.ALTER,
    56: AclOperation.CLUSTER_ACTION,
    57: AclOperation.ALTER,
    60: AclOperation.ALTER,
    62: AclOperation.CLUSTER_ACTION,
    63: AclOperation.CLUSTER_ACTION,
    64: AclOperation.ALTER,
    67: AclOperation.CLUSTER_ACTION,
    70: AclOperation.CLUSTER_ACTION,
    73: AclOperation.CLUSTER_ACTION,
}
CONTROLLER_API_VERSIONS: Final[Mapping[int, tuple[int, int]]] = {
    key: (api.min_version, api.max_version) for key, api in _APIS.items()
}


class ControllerApis:
    """Event-loop only."""

    def __init__(
        self,
        controller: QuorumController,
        listener_name: str,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.controller = controller
        self._context = ControllerRequestContext(controller, listener_name, authorizer=authorizer)

    async def handle(
        self,
        api_key: int,
        api_version: int,
        request: Any,
        principal: KafkaPrincipal | None = None,
        client_address: str = "",
    ) -> dict[str, Any]:
        """The response fields; a refused request as ``error_code`` (and
        ``error_message`` where the response has one) with the other fields zero,
        which the encoder fills (``build_entity(..., fill_missing=True)``).
        ``principal`` and ``client_address``: who sent it (a forwarded request's
        client), for the authorizer."""
        api = _APIS.get(api_key)
        if api is None or not api.min_version <= api_version <= api.max_version:
            raise ValueError(f"API {api_key} v{api_version} is not served by a controller")
        context = self._context
        if principal is not None:
            context = replace(context, principal=principal, client_address=client_address)
        try:
            operation = _CLUSTER_OPERATION.get(api_key)
            if operation is not None:
                authorize_cluster_operation(context, operation)
            return await api.handler(context, api_version, request)
        except KafkaError as e:
            return error_response(api_key, request, e.error_code, api_error_message(e))
        except Exception:
            _log.exception("controller request %d v%d failed", api_key, api_version)
            return error_response(api_key, request, ErrorCode.unknown_server_error)
