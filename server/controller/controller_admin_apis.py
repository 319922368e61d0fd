"""The admin requests a controller listener answers (the admin half of Kafka's
``ControllerApis``): CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments, IncrementalAlterConfigs,
AlterConfigs and AlterUserScramCredentials, translated between kio's request entities,
the quorum controller's commands and the response fields as nested mappings (the
convention of ``server/handlers``). A standby's NotControllerError travels up to `ControllerApis`,
which answers NOT_CONTROLLER.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from tiercel.protocol.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    TopicAuthorizationFailedError,
)
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize, filter_by_authorized
from tiercel.server.controller.configuration_control_manager import (
    ConfigResource,
    ConfigResourceType,
    OpType,
)
from tiercel.server.controller.controller_request_context import ControllerRequestContext
from tiercel.server.controller.controller_requests import (
    CreatableTopic,
    CreatePartitionsTopic,
    ElectionType,
)
from tiercel.server.controller.scram_control_manager import (
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)

__all__ = [
    "alter_configs",
    "alter_partition_reassignments",
    "alter_user_scram_credentials",
    "create_partitions",
    "create_topics",
    "delete_topics",
    "elect_leaders",
    "incremental_alter_configs",
    "list_partition_reassignments",
]


def error_fields(error: KafkaError | None) -> dict[str, Any]:
    if error is None:
        return {"error_code": ErrorCode.none, "error_message": None}
    return {"error_code": error.error_code, "error_message": error.message}


def _creatable(context: ControllerRequestContext, names: set[str]) -> set[str]:
    """CREATE on the cluster, else on each topic (Kafka's ControllerApis.createTopics)."""
    if authorize(context, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, False):
        return names
    return filter_by_authorized(context, AclOperation.CREATE, ResourceType.TOPIC, names)


async def create_topics(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    creatable = _creatable(context, {t.name for t in request.topics})
    topics = [
        CreatableTopic(
            name=t.name,
            num_partitions=t.num_partitions,
            replication_factor=t.replication_factor,
            assignments={a.partition_index: tuple(a.broker_ids) for a in t.assignments},
            configs={c.name: c.value for c in t.configs},
        )
        for t in request.topics
        if t.name in creatable
    ]
    results = await controller.create_topics(topics, request.validate_only) if topics else []
    refused = TopicAuthorizationFailedError("Authorization failed.")
    return {
        "throttle_time": 0,
        "topics": [
            *(
                {
                    "name": r.name,
                    "topic_id": r.topic_id,
                    **error_fields(r.error),
                    "num_partitions": r.num_partitions,
                    "replication_factor": r.replication_factor,
                    # The controller does not describe configs (Kafka's ControllerApis
                    # answers them only to principals that may describe the topic).
                    "configs": None,
                }
                for r in results
            ),
            *(
                {
                    "name": t.name,
                    "topic_id": uuid.UUID(int=0),
                    **error_fields(refused),
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "configs": None,
                }
                for t in request.topics
                if t.name not in creatable
            ),
        ],
    }


async def delete_topics(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    """By name (v1-5, ``topic_names``) or, from v6, by name or id (Kafka's
    ``ControllerApis.deleteTopics`` over ``DeleteTopicsRequest.topics()``)."""
    controller = context.controller
    topics: list[tuple[str | None, uuid.UUID | None]] = (
        [(t.name, t.topic_id) for t in request.topics]
        if version >= 6
        else [(name, None) for name in request.topic_names]
    )
    names = [name for name, _ in topics if name is not None]
    found = await controller.find_topic_ids(names) if names else {}
    wanted: list[tuple[str | None, uuid.UUID | None, KafkaError | None]] = []
    for name, topic_id in topics:
        if name is not None and topic_id not in (None, uuid.UUID(int=0)):
            wanted.append((name, None, InvalidRequestError("Both topic name and id given")))
        elif name is not None:
            resolved = found[name]
            if isinstance(resolved, KafkaError):
                wanted.append((name, None, resolved))
            else:
                wanted.append((name, resolved, None))
        else:
            wanted.append((None, topic_id, None))
    wanted = _authorize_deletes(context, wanted)
    ids = [topic_id for _, topic_id, error in wanted if error is None and topic_id is not None]
    results = await controller.delete_topics(ids) if ids else {}
    responses = []
    for name, topic_id, refused in wanted:
        error = refused if refused is not None or topic_id is None else results[topic_id]
        responses.append(
            {"name": name, "topic_id": topic_id or uuid.UUID(int=0), **error_fields(error)}
        )
    return {"throttle_time": 0, "responses": responses}


_Deletion = tuple[str | None, uuid.UUID | None, KafkaError | None]


def _authorize_deletes(
    context: ControllerRequestContext, wanted: list[_Deletion]
) -> list[_Deletion]:
    """Kafka's ControllerApis.deleteTopics checks: DELETE on the cluster, else DELETE on
    each topic; one the principal may not even DESCRIBE is refused without its name
    (asked by id) or id (asked by name), so that its existence is not disclosed."""
    if authorize(context, AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME, False):
        return wanted
    topics = context.controller.committed_state.replication.topics
    named = [
        (name if name is not None else _name_of(topics, topic_id), topic_id, error)
        for name, topic_id, error in wanted
    ]
    names = {name for name, _, error in named if error is None and name is not None}
    describable = filter_by_authorized(context, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    deletable = filter_by_authorized(context, AclOperation.DELETE, ResourceType.TOPIC, names)
    result: list[_Deletion] = []
    for (asked, topic_id, error), (name, _, _) in zip(wanted, named, strict=True):
        if error is not None or name is None or name in deletable:
            result.append((asked if asked is not None else name, topic_id, error))
        elif name in describable:
            result.append((name, topic_id, TopicAuthorizationFailedError()))
        elif asked is None:
            result.append((None, topic_id, TopicAuthorizationFailedError()))
        else:
            result.append((asked, None, TopicAuthorizationFailedError()))
    return result


def _name_of(topics: Mapping[uuid.UUID, Any], topic_id: uuid.UUID | None) -> str | None:
    info = None if topic_id is None else topics.get(topic_id)
    return None if info is None else str(info.name)


async def create_partitions(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    # ALTER on each topic (Kafka's ControllerApis.handleCreatePartitions).
    alterable = filter_by_authorized(
        context, AclOperation.ALTER, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    topics = [
        CreatePartitionsTopic(
            name=t.name,
            count=t.count,
            assignments=(
                None if t.assignments is None else tuple(tuple(a.broker_ids) for a in t.assignments)
            ),
        )
        for t in request.topics
        if t.name in alterable
    ]
    results = await controller.create_partitions(topics, request.validate_only) if topics else {}
    refused = TopicAuthorizationFailedError("The topic authorization is failed.")
    return {
        "throttle_time": 0,
        "results": [
            *({"name": name, **error_fields(e)} for name, e in results.items()),
            *(
                {"name": t.name, **error_fields(refused)}
                for t in request.topics
                if t.name not in alterable
            ),
        ],
    }


async def elect_leaders(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    # v0 has no ElectionType: always preferred.
    election = ElectionType(request.election_type if version >= 1 else 0)
    partitions = (
        None
        if request.topic_partitions is None
        else {t.topic: list(t.partitions) for t in request.topic_partitions}
    )
    results = await controller.elect_leaders(election, partitions)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append({"partition_id": partition, **error_fields(error)})
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "replica_election_results": [
            {"topic": topic, "partition_result": parts} for topic, parts in by_topic.items()
        ],
    }


async def alter_partition_reassignments(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    changes = {
        t.name: {
            p.partition_index: None if p.replicas is None else tuple(p.replicas)
            for p in t.partitions
        }
        for t in request.topics
    }
    results = await controller.alter_partition_reassignments(changes)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "responses": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        **error_fields(results[(t.name, p.partition_index)]),
                    }
                    for p in t.partitions
                ],
            }
            for t in request.topics
        ],
    }


async def list_partition_reassignments(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    topics = (
        None
        if request.topics is None
        else {t.name: list(t.partition_indexes) for t in request.topics}
    )
    ongoing = await controller.list_partition_reassignments(topics)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for r in ongoing:
        by_topic.setdefault(r.topic, []).append(
            {
                "partition_index": r.partition,
                "replicas": r.replicas,
                "adding_replicas": r.adding_replicas,
                "removing_replicas": r.removing_replicas,
            }
        )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }


def _resource(context: ControllerRequestContext, resource: Any) -> ConfigResource | KafkaError:
    """The resource to alter, or why not: an unexpected type, or no ALTER_CONFIGS on the
    topic or the cluster (Kafka's ControllerApis.authorizeAlterResource)."""
    try:
        key = ConfigResource(ConfigResourceType(resource.resource_type), resource.resource_name)
    except ValueError:
        # BROKER_LOGGER and the others are answered by brokers, not the controller.
        return InvalidRequestError(f"Unexpected resource type {resource.resource_type}")
    if key.type == ConfigResourceType.TOPIC:
        if authorize(context, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, key.name):
            return key
        return TopicAuthorizationFailedError("Topic authorization failed.")
    if authorize(context, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return key
    return ClusterAuthorizationFailedError("Cluster authorization failed.")


def _config_responses(
    resources: Any,
    keys: list[ConfigResource | KafkaError],
    results: Mapping[ConfigResource, KafkaError | None],
) -> list[dict[str, Any]]:
    responses = []
    for resource, key in zip(resources, keys, strict=True):
        error = key if isinstance(key, KafkaError) else results[key]
        responses.append(
            {
                **error_fields(error),
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
            }
        )
    return responses


async def incremental_alter_configs(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    keys = [_resource(context, r) for r in request.resources]
    changes = {
        key: {c.name: (OpType(c.config_operation), c.value) for c in r.configs}
        for r, key in zip(request.resources, keys, strict=True)
        if isinstance(key, ConfigResource)
    }
    results = await controller.incremental_alter_configs(changes, request.validate_only)
    return {"throttle_time": 0, "responses": _config_responses(request.resources, keys, results)}


async def alter_configs(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    controller = context.controller
    keys = [_resource(context, r) for r in request.resources]
    changes = {
        key: {c.name: c.value for c in r.configs}
        for r, key in zip(request.resources, keys, strict=True)
        if isinstance(key, ConfigResource)
    }
    results = await controller.legacy_alter_configs(changes, request.validate_only)
    return {"throttle_time": 0, "responses": _config_responses(request.resources, keys, results)}


async def alter_user_scram_credentials(
    context: ControllerRequestContext, version: int, request: Any
) -> dict[str, Any]:
    """Kafka's ``ControllerApis.handleAlterUserScramCredentials``."""
    results = await context.controller.alter_user_scram_credentials(
        [ScramCredentialDeletion(d.name, d.mechanism) for d in request.deletions],
        [
            ScramCredentialUpsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
            for u in request.upsertions
        ],
    )
    return {
        "throttle_time": 0,
        "results": [
            {"user": r.user, "error_code": r.error_code, "error_message": r.error_message}
            for r in results
        ],
    }
