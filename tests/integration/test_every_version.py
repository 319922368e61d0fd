"""Every advertised version of every API gets a proper answer.

For each (API, version) the broker supports, a minimal request — every field at its
zero value, except a few that would make the request pointless (acks=0 has no reply) —
is sent on one connection; the broker must answer it with the right correlation id,
keep the connection open, and the answer must decode and carry no UNKNOWN_SERVER_ERROR
in any error code, nested ones included: a handler that crashes still sends a response
(KafkaApis turns the exception into UNKNOWN_SERVER_ERROR), so an answer alone proves
nothing. This is what catches a handler that reads a field an older version lacks.
A second request per version puts one element in every array of entities (a topic and
group that do not exist), so the handlers' per-item paths run too.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from support.broker import BrokerProcess
from support.clients import create_topic, running_broker
from support.wire import WireClient, error_codes
from tiercel.protocol.entities import build_entity, nested_entity, request_class
from tiercel.server.kafka_apis import api_table

_OVERRIDES: dict[int, dict[str, Any]] = {
    0: {"acks": 1, "timeout": datetime.timedelta(seconds=1),
        "topic_data": [{"name": "versions", "partition_data": [{"index": 0, "records": None}]}]},
    1: {"max_wait": datetime.timedelta(milliseconds=1), "max_bytes": 1024,
        "topics": [{"topic": "versions",
                    "partitions": [{"partition": 0, "partition_max_bytes": 1024}]}]},
    3: {"topics": None},
    18: {"client_software_name": "tests", "client_software_version": "1"},
    19: {"timeout": datetime.timedelta(seconds=1)},
    20: {"timeout": datetime.timedelta(seconds=1)},
    37: {"timeout": datetime.timedelta(seconds=1)},
    21: {"timeout": datetime.timedelta(seconds=1)},
}  # fmt: skip

CASES = [
    pytest.param(spec.api_key, version, id=f"{spec.handler.__name__.rsplit('.', 1)[-1]}-v{version}")
    for spec in api_table().values()
    for version in range(spec.min_version, spec.max_version + 1)
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(Path(tmp_path_factory.mktemp("versions"))) as broker:
        create_topic(broker.bootstrap, "versions", 1)
        yield broker


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(broker.bootstrap) as wire:
        yield wire


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_minimal_request_is_answered(client: WireClient, api_key: int, version: int) -> None:
    request = build_entity(
        request_class(api_key, version), _OVERRIDES.get(api_key, {}), fill_missing=True
    )
    response = client.request(request)  # raises if the connection closes or it is undecodable
    crashed = [
        path for path, code in error_codes(response) if code == ErrorCode.unknown_server_error
    ]
    assert not crashed, f"UNKNOWN_SERVER_ERROR at {crashed}: {response!r}"


def _one_of_everything(entity_type: type[Any]) -> dict[str, Any]:
    """Every array holds one element, entities recursively; strings name a topic or group
    that does not exist, numbers are 0. The handlers' per-item paths run, not just empty
    loops."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(entity_type):
        nested, is_tuple = nested_entity(field.type)
        is_array = typing.get_origin(field.type) is tuple
        kafka_type = field.metadata.get("kafka_type")
        if nested is not None:
            item: Any = _one_of_everything(nested)
        elif kafka_type == "string":
            item = "ghost-group" if "group" in field.name else "ghost"
        elif is_array and kafka_type in _NUMBERS:
            item = 0
        else:
            continue  # fill_missing gives the zero value
        values[field.name] = [item] if is_tuple or is_array else item
    return values


_NUMBERS = frozenset({"int8", "int16", "int32", "int64", "uint16", "uint32"})


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_request_with_one_of_everything_is_answered(
    client: WireClient, api_key: int, version: int
) -> None:
    request_type = request_class(api_key, version)
    values = {**_one_of_everything(request_type), **_OVERRIDES.get(api_key, {})}
    request = build_entity(request_type, values, fill_missing=True)
    if getattr(request, "acks", None) == 0:
        return
    response = client.request(request)
    crashed = [p for p, code in error_codes(response) if code == ErrorCode.unknown_server_error]
    assert not crashed, f"UNKNOWN_SERVER_ERROR at {crashed}: {response!r}"
