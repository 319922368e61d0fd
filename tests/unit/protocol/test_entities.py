"""protocol/entities.py: building kio entities from mappings, with kio's public API only."""

from __future__ import annotations

import re
from pathlib import Path

from kio.schema.fetch.v16.response import FetchResponse
from kio.schema.fetch_snapshot.v1.response import LeaderIdAndEpoch, PartitionSnapshot
from kio.schema.metadata.v12.response import MetadataResponse

from tiercel.protocol.entities import build_entity, entity_fields

ROOT = Path(__file__).resolve().parents[3]


def test_no_module_imports_kio_private_modules() -> None:
    # kio's underscore modules (kio.serial._introspect, ...) change without notice.
    private = re.compile(r"^\s*(?:from|import)\s+kio(?:\.\w+)*\._", re.MULTILINE)
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("protocol", "server", "storage", "config")
        for path in (ROOT / package).rglob("*.py")
        if private.search(path.read_text())
    ]
    assert offenders == []


def test_nested_entities_and_arrays_are_built_from_mappings() -> None:
    response = build_entity(
        MetadataResponse,
        {"topics": [{"name": "t", "error_code": 3, "partitions": [{"partition_index": 1}]}]},
        fill_missing=True,
    )
    (topic,) = response.topics
    assert (topic.name, int(topic.error_code), topic.topic_id) == ("t", 3, None)
    assert [int(p.partition_index) for p in topic.partitions] == [1]
    assert response.brokers == ()


def test_optional_fields_default_to_none_and_absent_keys_are_ignored() -> None:
    response = build_entity(FetchResponse, {"responses": [], "not_a_field": 1}, fill_missing=True)
    assert response.responses == ()
    assert "node_endpoints" in entity_fields(FetchResponse)


def test_a_tagged_struct_without_a_default_is_all_defaults() -> None:
    snapshot = build_entity(PartitionSnapshot, {"index": 0}, fill_missing=True)
    assert snapshot.current_leader == LeaderIdAndEpoch(leader_id=0, leader_epoch=0)
