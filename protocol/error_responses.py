"""The response a request gets when it failed as a whole (Kafka's
``AbstractRequest.getErrorResponse``, one override per request class).

Two places answer so: a broker whose forwarding to the controller failed (Kafka's
ForwardingManager) and a controller that cannot handle the request, a standby above all
(Kafka's ControllerApis.handleError). The error goes at the top level where the response
has an error code there, and on every topic, partition or resource the request named
where the response lists them; fields are given for every version and the encoder keeps
those the request's version has (``build_entity``).
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode, KafkaError

__all__ = ["api_error_message", "error_response"]

_CREATE_TOPICS: Final = 19
_DELETE_TOPICS: Final = 20
_ALTER_CONFIGS: Final = 33
_CREATE_ACLS: Final = 30
_DELETE_ACLS: Final = 31
_CREATE_PARTITIONS: Final = 37
_ELECT_LEADERS: Final = 43
_INCREMENTAL_ALTER_CONFIGS: Final = 44
_ALTER_PARTITION_REASSIGNMENTS: Final = 45
_LIST_PARTITION_REASSIGNMENTS: Final = 46
_ALTER_USER_SCRAM_CREDENTIALS: Final = 51


def api_error_message(error: KafkaError) -> str | None:
    """The message an error response carries for ``error`` (Kafka's
    ApiError.fromThrowable): none for UNKNOWN_SERVER_ERROR, whose text could leak the
    server's internals, nor for an error raised without a message of its own."""
    if error.error_code == ErrorCode.unknown_server_error:
        return None
    if error.message == error.error_code.name:
        return None
    return error.message


def error_response(
    api_key: int, request: Any, code: ErrorCode, message: str | None = None
) -> dict[str, Any]:
    """The response fields of ``request`` (a kio entity of API ``api_key``) failed with
    ``code``. An API without per-entity results gets the top-level fields only, as
    Kafka's BrokerRegistration, BrokerHeartbeat, AlterPartition, UpdateFeatures (no
    results: ``createWithErrors`` of no updates), DescribeCluster... requests answer."""
    response: dict[str, Any] = {"throttle_time": 0, "error_code": code, "error_message": message}
    per_entity = {"error_code": code, "error_message": message}
    if api_key == _CREATE_TOPICS:
        # CreatableTopicResult's defaults (a zero id, -1 counts, null configs) for what
        # the failure left unknown.
        response["topics"] = [
            {
                "name": t.name,
                "topic_id": None,
                **per_entity,
                "num_partitions": -1,
                "replication_factor": -1,
                "configs": None,
            }
            for t in request.topics
        ]
    elif api_key == _DELETE_TOPICS:
        # DeleteTopicsRequest.getErrorResponse sets no message on a topic.
        response["responses"] = [
            {"name": name, "topic_id": topic_id, "error_code": code}
            for name, topic_id in _deleted_topics(request)
        ]
    elif api_key == _ALTER_USER_SCRAM_CREDENTIALS:
        # AlterUserScramCredentialsRequest.getErrorResponse: each user named, once, sorted.
        users = {d.name for d in request.deletions} | {u.name for u in request.upsertions}
        response["results"] = [{"user": user, **per_entity} for user in sorted(users)]
    elif api_key == _CREATE_PARTITIONS:
        response["results"] = [{"name": t.name, **per_entity} for t in request.topics]
    elif api_key == _CREATE_ACLS:
        response["results"] = [per_entity for _ in request.creations]
    elif api_key == _DELETE_ACLS:
        response["filter_results"] = [{**per_entity, "matching_acls": []} for _ in request.filters]
    elif api_key in (_ALTER_CONFIGS, _INCREMENTAL_ALTER_CONFIGS):
        response["responses"] = [
            {"resource_type": r.resource_type, "resource_name": r.resource_name, **per_entity}
            for r in request.resources
        ]
    elif api_key == _ELECT_LEADERS:
        # A null topic_partitions (every partition) lists none.
        response["replica_election_results"] = [
            {
                "topic": t.topic,
                "partition_result": [{"partition_id": p, **per_entity} for p in t.partitions],
            }
            for t in request.topic_partitions or ()
        ]
    elif api_key == _ALTER_PARTITION_REASSIGNMENTS:
        response["responses"] = [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, **per_entity} for p in t.partitions
                ],
            }
            for t in request.topics
        ]
    elif api_key == _LIST_PARTITION_REASSIGNMENTS:
        # The partitions asked about, with no replicas: the error is the top level's.
        response["topics"] = [
            {"name": t.name, "partitions": [{"partition_index": p} for p in t.partition_indexes]}
            for t in request.topics or ()
        ]
    return response


def _deleted_topics(request: Any) -> list[tuple[str | None, uuid.UUID | None]]:
    """DeleteTopicsRequest.topics(): v6+ names topics by name or id, older versions by
    name only (their ids zero, None as kio has Kafka's Uuid.ZERO_UUID)."""
    if hasattr(request, "topic_names"):
        return [(name, None) for name in request.topic_names]
    return [(t.name, t.topic_id) for t in request.topics]
