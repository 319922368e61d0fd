"""protocol/error_responses.py: a failed request's response as Kafka's
AbstractRequest.getErrorResponse builds it, for every API a controller serves and every
API a broker forwards to it, in every version either serves."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from tiercel.protocol.entities import (
    ChunkWriter,
    build_entity,
    encode_entity,
    request_class,
    response_class,
)
from tiercel.protocol.error_responses import api_error_message, error_response
from tiercel.protocol.errors import (
    ErrorCode,
    InvalidReplicationFactorError,
    NotControllerError,
    UnknownServerError,
)
from tiercel.server.controller.controller_apis import CONTROLLER_API_VERSIONS
from tiercel.server.forwarding_manager import FORWARDED_APIS, FORWARDED_ONLY_APIS
from tiercel.server.kafka_apis import api_table

API_VERSIONS = 18
TOPIC = {"name": "t", "topic": "t", "partitions": [0], "count": 2, "partition_indexes": [0, 1]}
SAMPLE: dict[str, object] = {
    "topics": [TOPIC],
    "topic_names": ["t"],
    "resources": [{"resource_type": 2, "resource_name": "t", "configs": []}],
    "topic_partitions": [TOPIC],
    # CreateAcls and DeleteAcls: one binding, one filter.
    "creations": [{"resource_type": 2, "resource_name": "t", "principal": "User:a"}],
    "filters": [{"resource_type_filter": 2, "resource_name_filter": "t"}],
    # AlterUserScramCredentials: a user deleted and one upserted.
    "deletions": [{"name": "u", "mechanism": 1}],
    "upsertions": [{"name": "v", "mechanism": 1, "iterations": 4096}],
}


def sample_request(api_key: int, version: int) -> Any:
    fields = SAMPLE
    if api_key == 45:  # AlterPartitionReassignments: partitions are entities
        fields = {"topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    return build_entity(request_class(api_key, version), fields, fill_missing=True)


def served_versions() -> list[tuple[int, int]]:
    """Every (API, version) a controller listener or a broker's forwarding answers."""
    broker = api_table()
    pairs = {
        (key, v)
        for key, (low, high) in CONTROLLER_API_VERSIONS.items()
        if key != API_VERSIONS  # answered even by a standby, never refused whole
        for v in range(low, high + 1)
    }
    pairs |= {
        (key, v)
        for key in FORWARDED_APIS
        for low, high in [
            FORWARDED_ONLY_APIS.get(key) or (broker[key].min_version, broker[key].max_version)
        ]
        for v in range(low, high + 1)
    }
    return sorted(pairs)


def error_codes(entity: object) -> list[int]:
    if isinstance(entity, tuple):
        return [c for item in entity for c in error_codes(item)]
    if not dataclasses.is_dataclass(entity):
        return []
    found = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        found += [value] if f.name == "error_code" else error_codes(value)
    return found


def respond(api_key: int, version: int, message: str | None = "m") -> Any:
    fields = error_response(
        api_key, sample_request(api_key, version), ErrorCode.not_controller, message
    )
    entity = build_entity(response_class(api_key, version), fields, fill_missing=True)
    encode_entity(ChunkWriter(), entity)
    return entity


@pytest.mark.parametrize(("api_key", "version"), served_versions())
def test_every_served_version_has_an_error_response(api_key: int, version: int) -> None:
    # The error at the top level where there is one and on every entity the request named.
    codes = error_codes(respond(api_key, version))
    assert codes and set(codes) == {ErrorCode.not_controller}


def test_create_topics_results_carry_the_message_and_unknown_counts() -> None:
    response = respond(19, 7)
    (topic,) = response.topics
    assert (topic.name, topic.error_code, topic.error_message) == ("t", 41, "m")
    assert (topic.num_partitions, topic.replication_factor, topic.configs) == (-1, -1, None)
    assert topic.topic_id is None


@pytest.mark.parametrize("version", [1, 5])
def test_delete_topics_by_name_in_older_versions(version: int) -> None:
    # v1-5 name topics in topic_names; DeleteTopicsRequest.getErrorResponse sets no message.
    (topic,) = respond(20, version).responses
    assert topic.name == "t" and topic.error_code == ErrorCode.not_controller
    assert getattr(topic, "error_message", None) is None


def test_delete_topics_by_id_in_v6() -> None:
    topic_id = uuid.UUID(int=7)
    request = build_entity(
        request_class(20, 6),
        {"topics": [{"name": None, "topic_id": topic_id}]},
        fill_missing=True,
    )
    fields = error_response(20, request, ErrorCode.not_controller, "m")
    (topic,) = build_entity(response_class(20, 6), fields, fill_missing=True).responses
    assert (topic.name, topic.topic_id, topic.error_message) == (None, topic_id, None)


def test_resources_and_partitions_carry_the_message() -> None:
    for api_key, version in ((33, 2), (44, 1), (37, 3)):
        entity = respond(api_key, version)
        [result] = entity.responses if api_key != 37 else entity.results
        assert result.error_message == "m"
    (election,) = respond(43, 2).replica_election_results
    assert [(p.partition_id, p.error_message) for p in election.partition_result] == [(0, "m")]
    reassign = respond(45, 0)
    assert reassign.error_message == "m"
    assert reassign.responses[0].partitions[0].error_message == "m"


def test_an_election_of_every_partition_lists_none() -> None:
    request = build_entity(request_class(43, 2), {"topic_partitions": None}, fill_missing=True)
    fields = error_response(43, request, ErrorCode.not_controller)
    assert fields["replica_election_results"] == [] and fields["error_code"] == 41


def test_list_partition_reassignments_names_the_partitions_asked_about() -> None:
    response = respond(46, 0)
    assert (response.error_code, response.error_message) == (ErrorCode.not_controller, "m")
    (topic,) = response.topics
    assert [(p.partition_index, p.replicas) for p in topic.partitions] == [(0, ()), (1, ())]
    every = build_entity(request_class(46, 0), {"topics": None}, fill_missing=True)
    assert error_response(46, every, ErrorCode.not_controller)["topics"] == []


def test_apis_without_results_answer_at_the_top_level() -> None:
    features = respond(57, 1)  # UpdateFeaturesResponse.createWithErrors: no results
    assert (features.error_code, features.error_message, features.results) == (41, "m", ())
    cluster = respond(60, 1)
    assert (cluster.error_code, cluster.error_message) == (41, "m")
    assert respond(62, 4).error_code == ErrorCode.not_controller


def test_the_message_is_kafkas_api_error_message() -> None:
    assert api_error_message(NotControllerError("node 3 is active")) == "node 3 is active"
    # A bare error has no message of its own; an unknown error's text stays on the server.
    assert api_error_message(InvalidReplicationFactorError()) is None
    assert api_error_message(UnknownServerError("KeyError: 'secret'")) is None


def test_alter_user_scram_credentials_fails_on_each_user_once_sorted() -> None:
    """AlterUserScramCredentialsRequest.getErrorResponse: no top-level error code, one
    result per user named, sorted, a user both deleted and upserted once."""
    request = build_entity(
        request_class(51, 0),
        {
            "deletions": [{"name": "zed", "mechanism": 1}, {"name": "amy", "mechanism": 2}],
            "upsertions": [{"name": "zed", "mechanism": 2, "iterations": 4096}],
        },
        fill_missing=True,
    )
    fields = error_response(51, request, ErrorCode.not_controller, "m")
    results = [(r["user"], r["error_code"], r["error_message"]) for r in fields["results"]]
    assert results == [
        ("amy", ErrorCode.not_controller, "m"),
        ("zed", ErrorCode.not_controller, "m"),
    ]
