"""A KRaft broker's requests to the controller over NodeToControllerChannel, against a
scripted controller on a local socket: AlterPartition (DefaultAlterPartitionManager),
AllocateProducerIds (RpcProducerIdManager), its own topic creations
(ControllerTopicCreator)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from support.scripted_broker import ScriptedLeader
from tiercel.protocol.errors import (
    CoordinatorLoadInProgressError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from tiercel.server.admin_manager import CreatedTopic
from tiercel.server.controller_topic_creator import ControllerTopicCreator
from tiercel.server.coordinator.transaction.rpc_producer_id_manager import RpcProducerIdManager
from tiercel.server.node_to_controller_channel import (
    ControllerInformation,
    NodeToControllerChannel,
)
from tiercel.server.partition import PartitionState
from tiercel.server.replication.default_alter_partition_manager import (
    DefaultAlterPartitionManager,
)
from tiercel.storage.topic_partition import TopicPartition

ALTER_PARTITION, ALLOCATE_PRODUCER_IDS = 56, 67
TOPIC_ID = uuid.UUID("0d4b1c8e-1f5e-4c39-9a57-4a1de1b7e5a2")
TP = TopicPartition("t", 2)
PROPOSED = PartitionState(
    leader=1, leader_epoch=4, isr=(1, 3), replicas=(1, 2, 3), partition_epoch=9
)


@pytest.fixture
async def controller() -> AsyncIterator[ScriptedLeader]:
    scripted = ScriptedLeader({ALTER_PARTITION: (2, 3), ALLOCATE_PRODUCER_IDS: (0, 0)})
    scripted.server = await asyncio.start_server(scripted.serve, "127.0.0.1", 0)
    yield scripted
    scripted.server.close()
    await scripted.server.wait_closed()


def channel_to(controller: ScriptedLeader) -> NodeToControllerChannel:
    host, port = controller.endpoint
    info = ControllerInformation(3000, host, port)
    return NodeToControllerChannel(lambda: info, "broker-1", 5.0, 0.02)


def alter_partition_answer(error: int, isr: list[int], partition_epoch: int) -> dict[str, object]:
    partition = {
        "partition_index": 2,
        "error_code": error,
        "leader_id": 1,
        "leader_epoch": 4,
        "isr": isr,
        "partition_epoch": partition_epoch,
    }
    return {"error_code": 0, "topics": [{"topic_id": TOPIC_ID, "partitions": [partition]}]}


async def test_alter_partition(controller: ScriptedLeader) -> None:
    channel = channel_to(controller)
    manager = DefaultAlterPartitionManager(
        1, lambda: 77, {"t": TOPIC_ID}.get, lambda b: 100 + b, channel, 5.0
    )
    controller.answers[ALTER_PARTITION] = alter_partition_answer(0, [1, 3], 10)
    stored = await manager.submit(TP, PROPOSED)
    assert stored == PartitionState(1, 4, (1, 3), (1, 2, 3), partition_epoch=10)
    [(_, version, request)] = [r for r in controller.requests if r[0] == ALTER_PARTITION]
    assert version == 3 and (request.broker_id, request.broker_epoch) == (1, 77)
    [partition] = request.topics[0].partitions
    assert request.topics[0].topic_id == TOPIC_ID
    assert (partition.partition_index, partition.leader_epoch, partition.partition_epoch) == (
        2,
        4,
        9,
    )
    assert [(s.broker_id, s.broker_epoch) for s in partition.new_isr_with_epochs] == [
        (1, 101),
        (3, 103),
    ]
    # Lost to another change: fall back and wait for the metadata log.
    controller.answers[ALTER_PARTITION] = alter_partition_answer(
        95, [], -1
    )  # INVALID_UPDATE_VERSION
    assert await manager.submit(TP, PROPOSED) is None
    # Anything else is raised for the leader to retry.
    controller.answers[ALTER_PARTITION] = alter_partition_answer(7, [], -1)  # REQUEST_TIMED_OUT
    with pytest.raises(KafkaError):
        await manager.submit(TP, PROPOSED)
    # A topic this broker no longer knows: nothing to send.
    sent = len(controller.requests)
    assert await manager.submit(TopicPartition("gone", 0), PROPOSED) is None
    assert len(controller.requests) == sent
    channel.close()


async def test_producer_ids_come_in_blocks_with_the_next_one_prefetched(
    controller: ScriptedLeader,
) -> None:
    channel = channel_to(controller)
    manager = RpcProducerIdManager(1, lambda: 77, channel, 5.0)
    controller.answers[ALLOCATE_PRODUCER_IDS] = {
        "error_code": 0,
        "producer_id_start": 1000,
        "producer_id_len": 10,
    }
    ids = [await manager.generate_producer_id() for _ in range(9)]
    assert ids == list(range(1000, 1009))
    # 90 % used: the next block was asked for already.
    controller.answers[ALLOCATE_PRODUCER_IDS] = {
        "error_code": 0,
        "producer_id_start": 5000,
        "producer_id_len": 10,
    }
    assert await manager.generate_producer_id() == 1009

    def allocations() -> int:
        return sum(1 for r in controller.requests if r[0] == ALLOCATE_PRODUCER_IDS)

    async with asyncio.timeout(10):
        while allocations() < 2:  # the prefetch went with no caller waiting for it
            await asyncio.sleep(0.005)
    assert [await manager.generate_producer_id() for _ in range(2)] == [5000, 5001]
    assert allocations() == 2
    requests = [r for r in controller.requests if r[0] == ALLOCATE_PRODUCER_IDS]
    assert (requests[0][2].broker_id, requests[0][2].broker_epoch) == (1, 77)
    channel.close()


async def test_producer_ids_when_the_controller_refuses(controller: ScriptedLeader) -> None:
    channel = channel_to(controller)
    manager = RpcProducerIdManager(1, lambda: 77, channel, 5.0)
    controller.answers[ALLOCATE_PRODUCER_IDS] = {
        "error_code": 102,  # BROKER_ID_NOT_REGISTERED
        "producer_id_start": -1,
        "producer_id_len": 0,
    }
    with pytest.raises(CoordinatorLoadInProgressError):
        await manager.generate_producer_id()
    controller.answers[ALLOCATE_PRODUCER_IDS] = {
        "error_code": 0,
        "producer_id_start": 0,
        "producer_id_len": 1000,
    }
    assert await manager.generate_producer_id() == 0
    channel.close()


async def test_a_topic_creation_no_controller_answers() -> None:
    # A quorum without a majority has no active controller: the broker's own creation
    # (an internal topic on FindCoordinator, Metadata's auto-creation) ends in a Kafka
    # error its callers answer clients with, never an unexpected one.
    channel = NodeToControllerChannel(lambda: None, "broker-1", 5.0, 0.02)
    creator = ControllerTopicCreator(channel, 30000, 0.1)
    planned = CreatedTopic(uuid.uuid4(), {0: (1,)}, {})
    with pytest.raises(UnknownTopicOrPartitionError, match="no active controller"):
        await creator.create_topic("__consumer_offsets", planned)
    channel.close()
