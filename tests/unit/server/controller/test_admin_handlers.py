"""The controller's admin APIs and CreatePartitions as handlers, on in-process controllers
sharing one store: ElectLeaders (per-partition errors as Kafka gives them, the wait for
the metadata to show elected leaders, the null list that leaves out elections not
needed), AlterPartitionReassignments and ListPartitionReassignments (served only by the
controller), and CreatePartitions refused during a reassignment or a deletion."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from controller_support import Cluster, tp

from tiercel.config.broker_config import BrokerConfig
from tiercel.protocol.entities import build_entity, request_class
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.request_header import RequestHeader
from tiercel.server.admin_manager import AdminManager
from tiercel.server.controller.controller import Controller
from tiercel.server.handlers import (
    alter_partition_reassignments,
    create_partitions,
    elect_leaders,
    list_partition_reassignments,
)
from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.metadata_listener import MetadataListener
from tiercel.server.metadata.store import BadVersionError, MetadataStore
from tiercel.server.request_context import BrokerServices, RequestContext

_UNUSED: Any = None


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await Cluster.open(tmp_path)
    for broker in (1, 2, 3):
        await c.start(broker)
    await c.create_topic("t", {0: (1, 2), 1: (2, 3)})
    await c.wait_state("t", lambda s: True)
    await c.wait_state("t", lambda s: True, partition=1)
    yield c
    await c.close()


@pytest.fixture
async def cache(cluster: Cluster) -> AsyncIterator[MetadataCache]:
    cache = MetadataCache(1, "cluster")

    async def on_topic(name: str, topic: TopicMetadata | None) -> None:
        return None

    listener = MetadataListener(cluster.store, cache, on_topic)
    await listener.start()
    yield cache
    await listener.stop()


def services(store: MetadataStore, cache: MetadataCache, controller: Controller) -> BrokerServices:
    config = BrokerConfig({"node.id": controller.node_id})
    return BrokerServices(
        config=config,
        node_id=controller.node_id,
        cluster_id="cluster",
        metadata_cache=cache,
        replica_manager=_UNUSED,
        log_manager=_UNUSED,
        admin_manager=AdminManager(config, store, cache),
        scheduler=_UNUSED,
        group_coordinator=_UNUSED,
        producer_id_manager=_UNUSED,
        transaction_coordinator=_UNUSED,
        controller=controller,
    )


async def call(
    broker: BrokerServices, module: Any, version: int, fields: dict[str, Any]
) -> dict[str, Any]:
    header = RequestHeader(module.API_KEY, version, 1, "test", 0)
    ctx = RequestContext(header, "127.0.0.1:1", "PLAINTEXT", broker)
    body = build_entity(request_class(module.API_KEY, version), fields, True)
    return cast(dict[str, Any], await module.handle(ctx, body))


def elect_request(partitions: dict[str, list[int]] | None, timeout_ms: int = 5000) -> Any:
    return {
        "election_type": 0,
        "topic_partitions": None
        if partitions is None
        else [{"topic": t, "partitions": p} for t, p in partitions.items()],
        "timeout": datetime.timedelta(milliseconds=timeout_ms),
    }


def results(response: dict[str, Any]) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    return {
        (topic["topic"], p["partition_id"]): (p["error_code"], p["error_message"])
        for topic in response["replica_election_results"]
        for p in topic["partition_result"]
    }


async def move_leader_of_t0_to_2(cluster: Cluster) -> None:
    await cluster.stop(1)
    await cluster.wait_state("t", lambda s: s.leader == 2)
    await cluster.start(1)
    await cluster.set_isr("t", (2, 1))


async def test_elect_leaders_answers_once_the_metadata_shows_the_leader(
    cluster: Cluster, cache: MetadataCache
) -> None:
    await move_leader_of_t0_to_2(cluster)
    broker = services(cluster.store, cache, await cluster.wait_active())
    response = await call(broker, elect_leaders, 2, elect_request({"t": [0, 1, 9], "x": [0]}))
    assert response["error_code"] == ErrorCode.none
    not_needed = "Leader election not needed for topic partition."
    unknown = "The partition does not exist."
    assert results(response) == {
        ("t", 0): (ErrorCode.none, None),
        ("t", 1): (ErrorCode.election_not_needed, not_needed),
        ("t", 9): (ErrorCode.unknown_topic_or_partition, unknown),
        ("x", 0): (ErrorCode.unknown_topic_or_partition, unknown),
    }
    state = cache.partition_state(tp("t"))
    assert state is not None and state.leader == 1


async def test_elect_leaders_for_all_partitions_leaves_out_those_not_needed(
    cluster: Cluster, cache: MetadataCache
) -> None:
    broker = services(cluster.store, cache, await cluster.wait_active())
    assert await cache.wait_until(lambda c: c.topic("t") is not None, 5)
    response = await call(broker, elect_leaders, 1, elect_request(None))
    assert (response["error_code"], results(response)) == (ErrorCode.none, {})
    await move_leader_of_t0_to_2(cluster)  # broker 1's controller stopped: another took over
    broker = services(cluster.store, cache, await cluster.wait_active())
    response = await call(broker, elect_leaders, 1, elect_request(None))
    assert results(response) == {("t", 0): (ErrorCode.none, None)}


async def test_elect_leaders_times_out_when_the_metadata_lags(cluster: Cluster) -> None:
    await move_leader_of_t0_to_2(cluster)
    frozen = MetadataCache(1, "cluster")  # no listener: never shows the new leader
    broker = services(cluster.store, frozen, await cluster.wait_active())
    response = await call(broker, elect_leaders, 2, elect_request({"t": [0]}, timeout_ms=100))
    assert results(response) == {("t", 0): (ErrorCode.request_timed_out, None)}
    # Elected nonetheless.
    await cluster.wait_state("t", lambda s: s.leader == 1)


async def test_other_brokers_answer_not_controller(cluster: Cluster, cache: MetadataCache) -> None:
    await cluster.wait_active()
    passive = next(c for c in cluster.controllers.values() if not c.is_active)
    broker = services(cluster.store, cache, passive)
    response = await call(broker, elect_leaders, 0, elect_request({"t": [0]}))
    assert results(response) == {("t", 0): (ErrorCode.not_controller, None)}
    alter = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [3]}]}]}
    response = await call(broker, alter_partition_reassignments, 0, alter)
    assert response["error_code"] == ErrorCode.not_controller
    assert response["error_message"] == "This is not the correct controller for this cluster."
    assert response["responses"] == []
    response = await call(broker, list_partition_reassignments, 0, {"topics": None})
    assert (response["error_code"], response["topics"]) == (ErrorCode.not_controller, [])


async def test_reassignments_through_the_handlers(cluster: Cluster, cache: MetadataCache) -> None:
    broker = services(cluster.store, cache, await cluster.wait_active())
    alter = {
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "replicas": [2, 3]},
                    {"partition_index": 1, "replicas": None},
                    {"partition_index": 7, "replicas": [1]},
                ],
            }
        ]
    }
    response = await call(broker, alter_partition_reassignments, 0, alter)
    assert response["error_code"] == ErrorCode.none
    ((topic),) = response["responses"]
    assert topic["name"] == "t"
    assert [(p["partition_index"], p["error_code"]) for p in topic["partitions"]] == [
        (0, ErrorCode.none),
        (1, ErrorCode.no_reassignment_in_progress),
        (7, ErrorCode.unknown_topic_or_partition),
    ]
    response = await call(
        broker,
        list_partition_reassignments,
        0,
        {"topics": [{"name": "t", "partition_indexes": [0, 1]}]},
    )
    assert response["topics"] == [
        {
            "name": "t",
            "partitions": [
                {
                    "partition_index": 0,
                    "replicas": [2, 3, 1],
                    "adding_replicas": [3],
                    "removing_replicas": [1],
                }
            ],
        }
    ]
    # A partition being reassigned cannot grow its topic (Kafka's race protection).
    grow = {"topics": [{"name": "t", "count": 3, "assignments": None}], "timeout": 1000}
    response = await call(broker, create_partitions, 3, grow)
    ((result),) = response["results"]
    assert result["error_code"] == ErrorCode.reassignment_in_progress


async def test_create_partitions_of_a_topic_being_deleted_is_refused(
    cluster: Cluster, cache: MetadataCache
) -> None:
    controller = await cluster.wait_active()
    broker = services(cluster.store, cache, controller)
    await controller.shutdown()  # the deletion request stays pending
    await cluster.store.create(zk.delete_topic_path("t"))
    grow = {"topics": [{"name": "t", "count": 3, "assignments": None}], "timeout": 1000}
    ((result),) = (await call(broker, create_partitions, 3, grow))["results"]
    assert (result["error_code"], result["error_message"]) == (
        ErrorCode.invalid_topic_exception,
        "The topic is queued for deletion.",
    )


async def test_create_partitions_plans_again_after_a_concurrent_write(
    cluster: Cluster, cache: MetadataCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = services(cluster.store, cache, await cluster.wait_active())
    real_set = cluster.store.set
    conflicts: list[int] = []

    async def set_once_conflicting(path: str, data: bytes, *, expected_version: int = -1) -> Any:
        if path == zk.topic_path("t") and not conflicts:
            conflicts.append(expected_version)
            raise BadVersionError(path)
        return await real_set(path, data, expected_version=expected_version)

    monkeypatch.setattr(cluster.store, "set", set_once_conflicting)
    grow = {"topics": [{"name": "t", "count": 3, "assignments": [{"broker_ids": [3, 1]}]}]}
    ((result),) = (await call(broker, create_partitions, 3, {**grow, "timeout": 5000}))["results"]
    assert result["error_code"] == ErrorCode.none and conflicts
    assert (await cluster.assignment("t")).partitions == {0: (1, 2), 1: (2, 3), 2: (3, 1)}
    await cluster.wait_state("t", lambda s: s.leader == 3, partition=2)
