"""KafkaApis: the table from API key to handler module, and request dispatch.

Event-loop only. Each handler module under ``server/handlers`` exports ``API_KEY``,
``MIN_VERSION``, ``MAX_VERSION`` and ``async handle(ctx, request)``, which returns the
response as nested mappings with Kafka's field names (turned into the kio entity of the
request's version here) or ``None`` when no response is sent (acks=0 produce).

Malformed frames, unknown API keys and unsupported versions close the connection, as
Kafka does; the one exception is ApiVersions, answered per KIP-511 so that a client can
learn which versions to use.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final, NoReturn

from tiercel.config.logging_setup import log_event
from tiercel.protocol.entities import (
    build_entity,
    decode_request_body,
    encode_response_frame,
    entity_fields,
    request_class,
    response_class,
)
from tiercel.protocol.error_responses import error_response
from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.protocol.request_header import (
    API_VERSIONS_KEY,
    InvalidRequestHeaderError,
    parse_request_header,
    peek_api,
)
from tiercel.server.forwarding_manager import (
    FORWARDED_APIS,
    FORWARDED_ONLY_APIS,
    ForwardingManager,
)
from tiercel.server.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_partition_reassignments,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)
from tiercel.server.handlers import alter_configs as alter_configs_handler
from tiercel.server.network.connection import Buffer, CloseConnection, Connection
from tiercel.server.request_context import BrokerServices, RequestContext

_log: Final = logging.getLogger("tiercel.apis")

HANDLER_MODULES: Final[tuple[ModuleType, ...]] = (
    produce,
    fetch,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    api_versions,
    create_topics,
    delete_topics,
    delete_records,
    describe_configs,
    alter_configs_handler,
    describe_log_dirs,
    create_partitions,
    incremental_alter_configs,
    describe_cluster,
    describe_topic_partitions,
    init_producer_id,
    describe_producers,
    offset_commit,
    offset_fetch,
    find_coordinator,
    join_group,
    heartbeat,
    leave_group,
    sync_group,
    describe_groups,
    list_groups,
    delete_groups,
    elect_leaders,
    alter_partition_reassignments,
    list_partition_reassignments,
    offset_delete,
    consumer_group_heartbeat,
    consumer_group_describe,
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    describe_transactions,
    list_transactions,
    txn_offset_commit,
    write_txn_markers,
    sasl_handshake,
    sasl_authenticate,
    describe_user_scram_credentials,
    describe_acls,
    create_acls,
    delete_acls,
)


@dataclass(frozen=True, slots=True)
class ApiSpec:
    api_key: int
    min_version: int
    max_version: int
    advertised_min_version: int
    handler: ModuleType | None
    """None for an API a KRaft broker only forwards to the controller."""


def api_table(modules: Sequence[ModuleType] = HANDLER_MODULES) -> dict[int, ApiSpec]:
    table = {}
    for module in modules:
        table[module.API_KEY] = ApiSpec(
            module.API_KEY,
            module.MIN_VERSION,
            module.MAX_VERSION,
            getattr(module, "ADVERTISED_MIN_VERSION", module.MIN_VERSION),
            module,
        )
    return table


def preload_schemas(table: dict[int, ApiSpec] | None = None) -> None:
    """Import the kio request and response classes of every supported version."""
    for spec in (api_table() if table is None else table).values():
        for version in range(spec.min_version, spec.max_version + 1):
            request_class(spec.api_key, version)
            response_class(spec.api_key, version)
    response_class(API_VERSIONS_KEY, 0)


class KafkaApis:
    def __init__(self, services: BrokerServices, table: dict[int, ApiSpec] | None = None) -> None:
        self._services = services
        self._table = api_table() if table is None else table
        if services.forwarding_manager is not None:
            # What a KRaft broker serves only by forwarding it (Kafka's
            # forwardToControllerOrFail): DescribeQuorum, for kafka-metadata-quorum.
            for api_key, (low, high) in FORWARDED_ONLY_APIS.items():
                self._table[api_key] = ApiSpec(api_key, low, high, low, None)
        services.api_versions = self.advertised_versions

    @property
    def advertised_versions(self) -> list[tuple[int, int, int]]:
        """(api_key, min, max) as ApiVersions advertises them."""
        return [
            (spec.api_key, spec.advertised_min_version, spec.max_version)
            for spec in sorted(self._table.values(), key=lambda s: s.api_key)
        ]

    async def handle_frame(
        self, connection: Connection, frame: bytes | memoryview
    ) -> Sequence[Buffer] | None:
        try:
            api_key, api_version, correlation_id = peek_api(frame)
        except InvalidRequestHeaderError as e:
            self._close(connection, "invalid_request_header", reason=str(e))
        spec = self._table.get(api_key)
        if spec is None:
            self._close(connection, "unknown_api_key", api_key=api_key, api_version=api_version)
        if not spec.min_version <= api_version <= spec.max_version:
            if api_key == API_VERSIONS_KEY:
                return self._unsupported_api_versions(correlation_id, spec)
            self._close(
                connection, "unsupported_api_version", api_key=api_key, api_version=api_version
            )
        request_type = request_class(api_key, api_version)
        try:
            header = parse_request_header(frame, request_type.__flexible__)
            request = decode_request_body(request_type, frame, header.size)
        except Exception as e:  # kio's native reader has several exception types
            self._close(
                connection,
                "invalid_request",
                api_key=api_key,
                api_version=api_version,
                reason=f"{type(e).__name__}: {e}",
            )
        ctx = RequestContext(
            header,
            connection.client_address,
            connection.listener_name,
            self._services,
            connection.principal,
        )
        forwarding = self._services.forwarding_manager
        if forwarding is not None and api_key in FORWARDED_APIS:
            return await self._forward(forwarding, frame, ctx, request)
        return await self._call(spec, ctx, request)

    async def _forward(
        self,
        forwarding: ForwardingManager,
        frame: bytes | memoryview,
        ctx: RequestContext,
        request: Any,
    ) -> Sequence[Buffer]:
        """The active controller's answer to a request only it handles (KIP-590)."""
        # The client's principal goes with the request, for the controller to authorize
        # (Kafka's ForwardingManager.forwardRequest with the request context's principal).
        principal = ctx.principal
        answer = await forwarding.forward(
            frame, ctx.client_address, (principal.principal_type, principal.name)
        )
        if not isinstance(answer, ErrorCode):
            return answer
        log_event(
            _log, logging.WARNING, "request_not_forwarded", **ctx.describe(), error=answer.name
        )
        response = error_response(ctx.header.api_key, request, answer)
        return self._encode(
            ctx.header.api_key, ctx.api_version, ctx.header.correlation_id, response, True
        )

    async def _call(
        self, spec: ApiSpec, ctx: RequestContext, request: Any
    ) -> Sequence[Buffer] | None:
        """The encoded response. A handler failure is logged with the request; the client
        gets the error in the response's top-level error code where the API has one
        (other fields zero), else the connection is closed, as Kafka would."""
        correlation_id = ctx.header.correlation_id
        try:
            assert spec.handler is not None  # forwarded-only APIs never get here
            result: Mapping[str, Any] | None = await spec.handler.handle(ctx, request)
            if result is None:
                return None
            return self._encode(spec.api_key, ctx.api_version, correlation_id, result)
        except CloseConnection:
            raise
        except Exception as e:
            code = e.error_code if isinstance(e, KafkaError) else ErrorCode.unknown_server_error
            log_event(
                _log,
                logging.ERROR,
                "request_failed",
                **ctx.describe(),
                error=code.name,
                reason=repr(e),
            )
            _log.debug("request_failed traceback", exc_info=e)
            if "error_code" in entity_fields(response_class(spec.api_key, ctx.api_version)):
                return self._encode(
                    spec.api_key,
                    ctx.api_version,
                    correlation_id,
                    {"error_code": code},
                    fill_missing=True,
                )
            raise CloseConnection() from e

    def _encode(
        self,
        api_key: int,
        api_version: int,
        correlation_id: int,
        response: Mapping[str, Any],
        fill_missing: bool = False,
    ) -> list[Buffer]:
        entity = build_entity(response_class(api_key, api_version), response, fill_missing)
        return encode_response_frame(correlation_id, entity)

    def _unsupported_api_versions(self, correlation_id: int, spec: ApiSpec) -> list[Buffer]:
        # KIP-511: answer in v0 format, which every client can read, naming the versions of
        # ApiVersions this broker supports so the client retries with one of them.
        response = {
            "error_code": ErrorCode.unsupported_version,
            "api_keys": [
                {
                    "api_key": spec.api_key,
                    "min_version": spec.min_version,
                    "max_version": spec.max_version,
                }
            ],
        }
        return self._encode(API_VERSIONS_KEY, 0, correlation_id, response)

    @staticmethod
    def _close(connection: Connection, event: str, **fields: object) -> NoReturn:
        log_event(_log, logging.WARNING, event, client=connection.client_address, **fields)
        raise CloseConnection()
