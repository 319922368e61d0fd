"""ControllerApis under StandardAuthorizer, as Kafka's ControllerApis: the brokers'
lifecycle APIs need CLUSTER_ACTION, CreateAcls ALTER on the cluster, CreateTopics
CREATE on the cluster or the topic; the ACLs CreateAcls writes are replayed into the
controller's state, which the authorizer is fed from."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from control_manager_support import CLUSTER_ID
from fake_raft import FakeRaftQuorum, new_controller, settle

from tiercel.protocol.entities import build_entity, request_class, response_class
from tiercel.protocol.errors import ErrorCode
from tiercel.server.authorizer.authorizer import StandardAuthorizer
from tiercel.server.controller.controller_apis import ControllerApis
from tiercel.server.controller.quorum_controller import QuorumController
from tiercel.server.network.principal_builder import KafkaPrincipal

ADMIN = KafkaPrincipal("User", "admin")
ALICE = KafkaPrincipal("User", "alice")
TOPIC, LITERAL, CREATE, ALLOW = 2, 3, 5, 3


class Apis:
    def __init__(self, controller: QuorumController) -> None:
        self.controller = controller
        self.authorizer = StandardAuthorizer()
        self.authorizer.configure({"super.users": "User:admin"})
        self.apis = ControllerApis(controller, "CONTROLLER", self.authorizer)

    async def call(
        self, principal: KafkaPrincipal, api_key: int, version: int, fields: dict[str, Any]
    ) -> Any:
        # What ControllerServer does before each request: the committed ACLs in.
        self.authorizer.update_acls(dict(self.controller.committed_state.acls.id_to_acl))
        request = build_entity(request_class(api_key, version), fields, fill_missing=True)
        response = await self.apis.handle(api_key, version, request, principal, "10.0.0.9:5000")
        return build_entity(response_class(api_key, version), response, fill_missing=True)


@pytest.fixture
async def apis() -> AsyncIterator[Apis]:
    quorum = FakeRaftQuorum()
    controller = new_controller(quorum, 0)
    quorum.elect(0)
    await settle(controller)
    yield Apis(controller)
    await controller.close()


async def test_broker_apis_need_cluster_action(apis: Apis) -> None:
    registration = {
        "broker_id": 1,
        "cluster_id": CLUSTER_ID,
        "incarnation_id": uuid.UUID(int=1),
        "listeners": [{"name": "PLAINTEXT", "host": "h", "port": 9092, "security_protocol": 0}],
        "features": [
            {"name": "metadata.version", "min_supported_version": 7, "max_supported_version": 25}
        ],
        "rack": None,
        "log_dirs": [uuid.UUID(int=101)],
    }
    refused = await apis.call(ALICE, 62, 4, registration)
    assert refused.error_code == ErrorCode.cluster_authorization_failed
    heartbeat = await apis.call(ALICE, 63, 1, {"broker_id": 1, "broker_epoch": 0})
    assert heartbeat.error_code == ErrorCode.cluster_authorization_failed
    assert (await apis.call(ADMIN, 62, 4, registration)).error_code == ErrorCode.none


async def test_create_topics_and_acls_are_authorized_with_the_request_s_principal(
    apis: Apis,
) -> None:
    topics = {"topics": [{"name": "t1", "num_partitions": 1, "replication_factor": 1}]}
    [refused] = (await apis.call(ALICE, 19, 7, topics)).topics
    assert refused.error_code == ErrorCode.topic_authorization_failed
    assert refused.error_message == "Authorization failed."
    grant = {
        "creations": [
            {
                "resource_type": TOPIC,
                "resource_name": "t",
                "resource_pattern_type": 4,  # PREFIXED
                "principal": "User:alice",
                "host": "*",
                "operation": CREATE,
                "permission_type": ALLOW,
            }
        ]
    }
    [not_allowed] = (await apis.call(ALICE, 30, 3, grant)).results
    assert not_allowed.error_code == ErrorCode.cluster_authorization_failed
    [created] = (await apis.call(ADMIN, 30, 3, grant)).results
    assert created.error_code == ErrorCode.none
    await settle(apis.controller)
    # The grant is committed: alice may now create topics starting with "t" (not "u").
    # No broker is registered, so placement fails next, past authorization.
    both = {
        "topics": [
            {"name": "t1", "num_partitions": 1, "replication_factor": 1},
            {"name": "u1", "num_partitions": 1, "replication_factor": 1},
        ]
    }
    results = {t.name: t.error_code for t in (await apis.call(ALICE, 19, 7, both)).topics}
    assert results["u1"] == ErrorCode.topic_authorization_failed
    assert results["t1"] not in (ErrorCode.topic_authorization_failed, ErrorCode.none)
