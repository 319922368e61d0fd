"""ControllerApis: the controller listener's requests, decoded as kio entities and
answered with fields that build the kio response of the request's version: a broker's
registration, heartbeats and unregistration, AlterPartition, AllocateProducerIds,
UpdateFeatures, ApiVersions, the admin requests, and NOT_CONTROLLER from a standby."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from control_manager_support import CLUSTER_ID
from fake_raft import FakeRaftQuorum, new_controller, settle

from tiercel.protocol.entities import (
    ChunkWriter,
    build_entity,
    encode_entity,
    request_class,
    response_class,
)
from tiercel.protocol.errors import ErrorCode
from tiercel.server.controller.controller_apis import CONTROLLER_API_VERSIONS, ControllerApis
from tiercel.server.controller.quorum_controller import QuorumController


class Apis:
    def __init__(self, controller: QuorumController) -> None:
        self.apis = ControllerApis(controller, "CONTROLLER")

    async def call(self, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        request = build_entity(request_class(api_key, version), fields, fill_missing=True)
        response = await self.apis.handle(api_key, version, request)
        entity = build_entity(response_class(api_key, version), response, fill_missing=True)
        encode_entity(ChunkWriter(), entity)  # the fields are the schema's
        return entity


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[FakeRaftQuorum, Apis, Apis]]:
    quorum = FakeRaftQuorum()
    active, standby = new_controller(quorum, 0), new_controller(quorum, 1)
    quorum.elect(0)
    await settle(active)
    yield quorum, Apis(active), Apis(standby)
    await active.close()
    await standby.close()


async def start_broker(apis: Apis, broker_id: int) -> int:
    registered = await apis.call(
        62,
        4,
        {
            "broker_id": broker_id,
            "cluster_id": CLUSTER_ID,
            "incarnation_id": uuid.UUID(int=broker_id),
            "listeners": [{"name": "PLAINTEXT", "host": "h", "port": 9092, "security_protocol": 0}],
            "features": [
                {
                    "name": "metadata.version",
                    "min_supported_version": 7,
                    "max_supported_version": 25,
                }
            ],
            "rack": None,
            "log_dirs": [uuid.UUID(int=100 + broker_id)],
        },
    )
    assert registered.error_code == ErrorCode.none
    heartbeat = await apis.call(
        63,
        1,
        {
            "broker_id": broker_id,
            "broker_epoch": registered.broker_epoch,
            "current_metadata_offset": registered.broker_epoch,
        },
    )
    assert heartbeat.error_code == ErrorCode.none and not heartbeat.is_fenced
    assert heartbeat.is_caught_up and not heartbeat.should_shut_down
    return int(registered.broker_epoch)


async def test_broker_lifecycle_and_producer_ids(
    cluster: tuple[FakeRaftQuorum, Apis, Apis],
) -> None:
    _, apis, _ = cluster
    epoch = await start_broker(apis, 1)
    stale = await apis.call(63, 1, {"broker_id": 1, "broker_epoch": epoch + 1})
    assert stale.error_code == ErrorCode.stale_broker_epoch
    block = await apis.call(67, 0, {"broker_id": 1, "broker_epoch": epoch})
    assert (block.producer_id_start, block.producer_id_len) == (0, 1000)
    gone = await apis.call(64, 0, {"broker_id": 1})
    assert gone.error_code == ErrorCode.none
    again = await apis.call(64, 0, {"broker_id": 1})
    assert again.error_code == ErrorCode.broker_id_not_registered


async def test_directories_assigned_and_failed(
    cluster: tuple[FakeRaftQuorum, Apis, Apis],
) -> None:
    _, apis, _ = cluster
    epochs = {b: await start_broker(apis, b) for b in (1, 2)}
    created = await apis.call(
        19,
        7,
        {
            "topics": [
                {
                    "name": "t",
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [1, 2]}],
                    "configs": [],
                }
            ],
            "timeout": 1000,
        },
    )
    assert created.topics[0].error_code == ErrorCode.none
    controller = apis.apis.controller
    topic_id = (await controller.find_topic_ids(["t"]))["t"]
    led = controller.state.replication.partition(topic_id, 0)
    assert led is not None and led.leader == 1
    heartbeat = await apis.call(
        63,
        1,
        {
            "broker_id": 1,
            "broker_epoch": epochs[1],
            "current_metadata_offset": epochs[1],
            "offline_log_dirs": [uuid.UUID(int=101)],
        },
    )
    assert heartbeat.error_code == ErrorCode.none and not heartbeat.is_fenced
    partition = controller.state.replication.partition(topic_id, 0)
    assert partition is not None and (partition.leader, partition.isr) == (2, (2,))
    assigned = await apis.call(
        73,
        0,
        {
            "broker_id": 2,
            "broker_epoch": epochs[2],
            "directories": [
                {
                    "id_": uuid.UUID(int=102),
                    "topics": [
                        {
                            "topic_id": topic_id,
                            "partitions": [{"partition_index": 0}, {"partition_index": 5}],
                        }
                    ],
                }
            ],
        },
    )
    assert assigned.error_code == ErrorCode.none
    [directory] = assigned.directories
    assert directory.id_ == uuid.UUID(int=102) and directory.topics[0].topic_id == topic_id
    assert [(p.partition_index, p.error_code) for p in directory.topics[0].partitions] == [
        (0, ErrorCode.none),
        (5, ErrorCode.unknown_topic_or_partition),
    ]


async def test_admin_requests(cluster: tuple[FakeRaftQuorum, Apis, Apis]) -> None:
    _, apis, _ = cluster
    for broker_id in (1, 2):
        await start_broker(apis, broker_id)
    created = await apis.call(
        19,
        7,
        {
            "topics": [
                {
                    "name": "t",
                    "num_partitions": 2,
                    "replication_factor": 2,
                    "assignments": [],
                    "configs": [{"name": "retention.ms", "value": "100"}],
                },
                {
                    "name": "bad",
                    "num_partitions": 1,
                    "replication_factor": 3,
                    "assignments": [],
                    "configs": [],
                },
            ],
            "timeout": 1000,
        },
    )
    [t, bad] = created.topics
    assert t.error_code == ErrorCode.none and t.num_partitions == 2 and t.topic_id is not None
    assert bad.error_code == ErrorCode.invalid_replication_factor
    more = await apis.call(37, 3, {"topics": [{"name": "t", "count": 3, "assignments": None}]})
    assert [r.error_code for r in more.results] == [ErrorCode.none]
    elected = await apis.call(
        43, 2, {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0]}]}
    )
    assert elected.replica_election_results[0].partition_result[0].error_code == (
        ErrorCode.election_not_needed
    )
    moved = await apis.call(
        45, 0, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}]}
    )
    assert moved.responses[0].partitions[0].error_code == ErrorCode.none
    listed = await apis.call(46, 0, {"topics": None})
    assert listed.topics == ()  # removing a replica in the ISR completes at once
    configs = await apis.call(
        44,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "t",
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "-2"}],
                }
            ]
        },
    )
    assert configs.responses[0].error_code == ErrorCode.invalid_config
    legacy = await apis.call(
        33,
        2,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "t",
                    "configs": [{"name": "retention.ms", "value": "5000"}],
                }
            ]
        },
    )
    assert legacy.responses[0].error_code == ErrorCode.none
    deleted = await apis.call(
        20, 6, {"topics": [{"name": "t", "topic_id": None}, {"name": "u", "topic_id": None}]}
    )
    assert [r.error_code for r in deleted.responses] == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
    ]


async def test_alter_partition(cluster: tuple[FakeRaftQuorum, Apis, Apis]) -> None:
    quorum, apis, _ = cluster
    epochs = {b: await start_broker(apis, b) for b in (1, 2)}
    created = await apis.call(
        19,
        7,
        {
            "topics": [
                {
                    "name": "t",
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [1, 2]}],
                    "configs": [],
                }
            ],
            "timeout": 1000,
        },
    )
    topic_id = created.topics[0].topic_id
    shrunk = await apis.call(
        56,
        3,
        {
            "broker_id": 1,
            "broker_epoch": epochs[1],
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "leader_epoch": 0,
                            "partition_epoch": 0,
                            "new_isr_with_epochs": [{"broker_id": 1, "broker_epoch": epochs[1]}],
                            "leader_recovery_state": 0,
                        }
                    ],
                }
            ],
        },
    )
    [partition] = shrunk.topics[0].partitions
    assert partition.error_code == ErrorCode.none
    assert partition.isr == (1,) and partition.partition_epoch == 1
    assert quorum.high_watermark == quorum.end_offset


async def test_update_features_and_api_versions(cluster: tuple[FakeRaftQuorum, Apis, Apis]) -> None:
    _, apis, _ = cluster
    versions = await apis.call(18, 4, {"client_software_name": "t", "client_software_version": "1"})
    assert {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys} == (
        CONTROLLER_API_VERSIONS
    )
    assert [(f.name, f.max_version_level) for f in versions.finalized_features] == [
        ("metadata.version", 25)
    ]
    assert [(f.name, f.min_version, f.max_version) for f in versions.supported_features] == [
        ("group.version", 0, 1),
        ("metadata.version", 7, 25),
    ]
    refused = await apis.call(
        57,
        1,
        {
            "timeout": 1000,
            "feature_updates": [
                {"feature": "metadata.version", "max_version_level": 99, "upgrade_type": 1}
            ],
        },
    )
    assert refused.error_code == ErrorCode.invalid_update_version
    assert refused.results[0].error_code == ErrorCode.invalid_update_version
    ok = await apis.call(
        57,
        2,
        {
            "timeout": 1000,
            "feature_updates": [
                {"feature": "metadata.version", "max_version_level": 24, "upgrade_type": 2}
            ],
        },
    )
    assert ok.error_code == ErrorCode.none


async def test_a_standby_answers_not_controller(cluster: tuple[FakeRaftQuorum, Apis, Apis]) -> None:
    _, _, standby = cluster
    created = await standby.call(
        19,
        7,
        {
            "topics": [
                {
                    "name": "t",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout": 1000,
        },
    )
    assert created.topics[0].error_code == ErrorCode.not_controller
    registered = await standby.call(
        62,
        4,
        {
            "broker_id": 1,
            "cluster_id": CLUSTER_ID,
            "incarnation_id": uuid.UUID(int=1),
            "listeners": [],
            "features": [],
            "rack": None,
        },
    )
    assert registered.error_code == ErrorCode.not_controller


async def test_a_standby_refuses_older_requests_on_every_topic(
    cluster: tuple[FakeRaftQuorum, Apis, Apis],
) -> None:
    _, active, standby = cluster
    await start_broker(active, 1)
    created = await active.call(
        19,
        7,
        {
            "topics": [
                {"name": n, "num_partitions": 1, "replication_factor": 1, "configs": []}
                for n in ("a", "b")
            ],
            "timeout": 1000,
        },
    )
    assert [t.error_code for t in created.topics] == [ErrorCode.none] * 2
    await settle(standby.apis.controller)
    # DeleteTopics v1-5 name their topics in topic_names, not topics.
    deleted = await standby.call(20, 5, {"topic_names": ["a", "b"], "timeout_ms": 1000})
    assert [(t.name, t.error_code) for t in deleted.responses] == [
        ("a", ErrorCode.not_controller),
        ("b", ErrorCode.not_controller),
    ]
    altered = await standby.call(
        44, 1, {"resources": [{"resource_type": 2, "resource_name": "a", "configs": []}]}
    )
    (resource,) = altered.responses
    assert resource.error_code == ErrorCode.not_controller
    assert resource.error_message == "The active controller appears to be node 0."


async def test_older_versions_alter_partition_v2_update_features_v0_delete_topics_v5(
    cluster: tuple[FakeRaftQuorum, Apis, Apis],
) -> None:
    _, apis, _ = cluster
    epochs = {b: await start_broker(apis, b) for b in (1, 2)}
    created = await apis.call(
        19,
        2,
        {
            "topics": [
                {
                    "name": "t",
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [2, 1]}],
                    "configs": [],
                }
            ],
            "timeout": 1000,
        },
    )
    topic_id = (await apis.apis.controller.find_topic_ids(["t"]))["t"]
    assert created.topics[0].error_code == ErrorCode.none
    shrunk = await apis.call(
        56,
        2,
        {
            "broker_id": 2,
            "broker_epoch": epochs[2],
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "leader_epoch": 0,
                            "partition_epoch": 0,
                            "new_isr": [2],
                        }
                    ],
                }
            ],
        },
    )
    assert shrunk.topics[0].partitions[0].isr == (2,)
    downgrade = await apis.call(
        57,
        0,
        {
            "timeout": 1000,
            "feature_updates": [
                {"feature": "metadata.version", "max_version_level": 24, "allow_downgrade": True}
            ],
        },
    )
    assert downgrade.error_code == ErrorCode.none
    assert [r.error_code for r in downgrade.results] == [ErrorCode.none]
    # DeleteTopics before v6 names its topics in topic_names.
    deleted = await apis.call(20, 5, {"topic_names": ["t", "u"], "timeout_ms": 1000})
    assert [(r.name, r.error_code) for r in deleted.responses] == [
        ("t", ErrorCode.none),
        ("u", ErrorCode.unknown_topic_or_partition),
    ]
    assert await apis.apis.controller.find_topic_ids(["t"]) != {"t": topic_id}


async def test_controllers_register_and_are_described(
    cluster: tuple[FakeRaftQuorum, Apis, Apis],
) -> None:
    _, active, standby = cluster
    for node_id in (0, 1):
        registered = await active.call(
            70,
            0,
            {
                "controller_id": node_id,
                "incarnation_id": uuid.UUID(int=50 + node_id),
                "listeners": [
                    {
                        "name": "CONTROLLER",
                        "host": "c",
                        "port": 9093 + node_id,
                        "security_protocol": 0,
                    },
                    {"name": "OTHER", "host": "o", "port": 19093, "security_protocol": 0},
                ],
                "features": [
                    {
                        "name": "metadata.version",
                        "min_supported_version": 7,
                        "max_supported_version": 25,
                    }
                ],
            },
        )
        assert registered.error_code == ErrorCode.none
    await settle(standby.apis.controller)
    described = await standby.call(60, 2, {"endpoint_type": 2})
    assert described.error_code == ErrorCode.none
    assert described.controller_id == 0 and described.cluster_id == CLUSTER_ID
    assert [(b.broker_id, b.host, b.port) for b in described.brokers] == [
        (0, "c", 9093),
        (1, "c", 9094),
    ]
    brokers = await standby.call(60, 1, {"endpoint_type": 1})
    assert brokers.error_code == ErrorCode.mismatched_endpoint_type
    unknown = await standby.call(60, 1, {"endpoint_type": 7})
    assert unknown.error_code == ErrorCode.unsupported_endpoint_type
    old = await standby.call(60, 0, {})
    assert old.error_code == ErrorCode.invalid_request
