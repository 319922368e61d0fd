"""Helpers for the quorum controller's unit tests: a settable clock, the controller's
config and bootstrap records, broker registrations, and `ManagersContext`, the control
managers of an active controller driven without one."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from typing import TypeVar

from tiercel.protocol.metadata.broker_records import BrokerEndpoint
from tiercel.protocol.metadata.cluster_records import FeatureLevelRecord
from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.protocol.metadata.metadata_version import FEATURE_NAME, LATEST_PRODUCTION
from tiercel.server.controller.broker_registration import BrokerRegistrationRequest
from tiercel.server.controller.control_managers import ControlManagers
from tiercel.server.controller.controller_requests import (
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    CreatableTopic,
)
from tiercel.server.controller.controller_result import ControllerResult
from tiercel.server.controller.quorum_controller_config import QuorumControllerConfig
from tiercel.server.metadata.image.broker_registration import VersionRange
from tiercel.server.metadata.image.partition_registration import PartitionRegistration

T = TypeVar("T")

CLUSTER_ID = "q1Sh-9_ISia_zwGINzRvyQ"
BOOTSTRAP = (
    ApiMessageAndVersion(
        FeatureLevelRecord(name=FEATURE_NAME, feature_level=LATEST_PRODUCTION.feature_level), 0
    ),
)


class MockTime:
    """Kafka's MockTime: milliseconds that move only when told."""

    def __init__(self, now: int = 10_000) -> None:
        self.now = now

    def milliseconds(self) -> int:
        return self.now

    def sleep(self, ms: int) -> None:
        self.now += ms


def controller_config(node_id: int = 0, **overrides: object) -> QuorumControllerConfig:
    values: dict[str, object] = {
        "node_id": node_id,
        "cluster_id": CLUSTER_ID,
        "quorum_node_ids": frozenset({0, 1, 2}),
        "max_idle_interval_ms": 60_000,
    }
    values.update(overrides)
    return QuorumControllerConfig(**values)  # type: ignore[arg-type]


def registration(
    broker_id: int, rack: str | None = None, incarnation: uuid.UUID | None = None
) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=CLUSTER_ID,
        incarnation_id=incarnation or uuid.UUID(int=broker_id + 1),
        listeners=(BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092 + broker_id),),
        features={FEATURE_NAME: VersionRange(7, LATEST_PRODUCTION.feature_level)},
        rack=rack,
        log_dirs=(uuid.UUID(int=(broker_id + 1) << 64),),
    )


class ManagersContext:
    """The control managers of an active controller without the controller: commands
    run, their records are replayed at consecutive offsets (as `QuorumController` does
    once they are appended)."""

    def __init__(self, **overrides: object) -> None:
        self.time = MockTime()
        self.state = ControlManagers(controller_config(**overrides), self.time, random.Random(7))
        self.state.cluster.activate()
        self.offset = 0
        self.replay(BOOTSTRAP)

    def replay(self, records: Sequence[ApiMessageAndVersion]) -> None:
        for record in records:
            self.state.replay(record.message, self.offset)
            self.offset += 1

    def run(self, result: ControllerResult[T]) -> T:
        self.replay(result.records)
        return result.response

    def register(self, broker_id: int, rack: str | None = None) -> int:
        finalized = self.state.feature.finalized_features(self.offset)
        result = self.state.cluster.register_broker(
            registration(broker_id, rack), self.offset, finalized
        )
        return self.run(result)

    def heartbeat(
        self, broker_id: int, want_fence: bool = False, want_shut_down: bool = False
    ) -> BrokerHeartbeatReply:
        registration_ = self.state.cluster.registration(broker_id)
        assert registration_ is not None
        request = BrokerHeartbeatRequest(
            broker_id, registration_.epoch, self.offset, want_fence, want_shut_down
        )
        offset = self.state.cluster.register_broker_record_offset(broker_id)
        return self.run(self.state.replication.process_broker_heartbeat(request, offset))

    def add_brokers(self, *broker_ids: int, racks: Sequence[str | None] = ()) -> None:
        """Registered and unfenced brokers."""
        for i, broker_id in enumerate(broker_ids):
            self.register(broker_id, racks[i] if i < len(racks) else None)
            assert not self.heartbeat(broker_id).is_fenced

    def create_topic(
        self, name: str, partitions: int = 1, factor: int = 1, **configs: str
    ) -> uuid.UUID:
        topic = CreatableTopic(name, partitions, factor, configs=configs)
        [result] = self.run(self.state.topics.create_topics([topic], validate_only=False))
        assert result.error is None, result.error
        assert result.topic_id is not None
        return result.topic_id

    def partition(self, topic_id: uuid.UUID, partition_id: int = 0) -> PartitionRegistration:
        partition = self.state.replication.partition(topic_id, partition_id)
        assert partition is not None
        return partition
