"""Partition reassignment through the controller (KIP-455, Kafka's ZooKeeper flow):
adding replicas, completion once the target is in the ISR (leadership moved off a
removed leader, removed replicas out of the ISR, then the assignment shrunk to the
target), cancellation, Kafka's validation errors, listing, and resumption by a new
controller."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from controller_support import Cluster, eventually, tp

from tiercel.protocol.errors import ErrorCode, KafkaError, NotControllerError
from tiercel.server.controller.controller import Controller
from tiercel.server.metadata import zk_data as zk


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = await Cluster.open(tmp_path)
    yield c
    await c.close()


async def started(cluster: Cluster, replicas: tuple[int, ...] = (1, 2)) -> Controller:
    for broker in (1, 2, 3, 4):
        await cluster.start(broker)
    await cluster.create_topic("t", {0: replicas, 1: (3, 4)})
    await cluster.wait_state("t", lambda s: True)
    await cluster.wait_state("t", lambda s: True, partition=1)
    return await cluster.wait_active()


def code(result: KafkaError | None) -> ErrorCode:
    assert result is not None
    return result.error_code


async def test_a_partition_moves_to_its_target_replicas(cluster: Cluster) -> None:
    controller = await started(cluster)
    assert await controller.alter_partition_reassignments({tp("t"): (2, 3)}, True) == {
        tp("t"): None
    }
    # Step A: RS = TRS + ORS, with the replicas being added and removed; the leader
    # epoch is bumped so that every replica sees the new replica set.
    assignment = await cluster.assignment("t")
    assert assignment.partitions[0] == (2, 3, 1)
    assert (assignment.adding_replicas, assignment.removing_replicas) == ({0: (3,)}, {0: (1,)})
    state = await cluster.state("t")
    assert state is not None and (state.leader, state.leader_epoch, state.isr) == (1, 1, (1, 2))
    listed = await controller.list_partition_reassignments(None)
    assert list(listed) == [tp("t")]
    assert (listed[tp("t")].adding, listed[tp("t")].removing) == ((3,), (1,))
    # Step B once the new replica joined the ISR: leadership leaves the removed leader
    # (one new epoch), which leaves the ISR, and RS becomes the target. As in Kafka's
    # onPartitionReassignment (B3-B4 before B6) the state is written before the topic
    # znode, so wait for the topic znode: a new leader alone does not mean RS = TRS yet.
    await cluster.set_isr("t", (1, 2, 3))
    assignment = await _assignment_when(cluster, lambda a: a.partitions[0] == (2, 3))
    assert assignment.partitions == {0: (2, 3), 1: (3, 4)}
    assert (assignment.adding_replicas, assignment.removing_replicas) == ({}, {})
    state = await cluster.state("t")
    assert state is not None and (state.leader, state.leader_epoch, state.isr) == (2, 2, (2, 3))
    assert await controller.list_partition_reassignments(None) == {}


async def test_a_reassignment_that_keeps_the_leader_only_bumps_its_epoch(
    cluster: Cluster,
) -> None:
    controller = await started(cluster, replicas=(1, 2, 3))
    await controller.alter_partition_reassignments({tp("t"): (1, 2)}, True)
    # Nothing to add: complete at once, 3 leaves the ISR and the assignment.
    state = await cluster.wait_state("t", lambda s: 3 not in s.isr)
    assert (state.leader, state.isr) == (1, (1, 2))
    assert (await cluster.assignment("t")).partitions[0] == (1, 2)


async def test_cancelling_goes_back_to_the_original_replicas(cluster: Cluster) -> None:
    controller = await started(cluster)
    await controller.alter_partition_reassignments({tp("t"): (3, 4)}, True)
    assert (await cluster.assignment("t")).partitions[0] == (3, 4, 1, 2)
    assert await controller.alter_partition_reassignments({tp("t"): None}, True) == {tp("t"): None}
    assignment = await cluster.assignment("t")
    assert assignment.partitions[0] == (1, 2)
    assert (assignment.adding_replicas, assignment.removing_replicas) == ({}, {})
    state = await cluster.state("t")
    assert state is not None and (state.leader, state.isr) == (1, (1, 2))
    # Nothing left to cancel.
    results = await controller.alter_partition_reassignments({tp("t"): None}, True)
    assert code(results[tp("t")]) == ErrorCode.no_reassignment_in_progress


async def test_a_new_target_replaces_the_ongoing_one(cluster: Cluster) -> None:
    controller = await started(cluster)
    await controller.alter_partition_reassignments({tp("t"): (3, 4)}, True)
    await controller.alter_partition_reassignments({tp("t"): (2, 4)}, True)
    # 3 is no longer wanted; the original replicas stay until the move completes.
    assignment = await cluster.assignment("t")
    assert assignment.partitions[0] == (2, 4, 1)
    assert (assignment.adding_replicas, assignment.removing_replicas) == ({0: (4,)}, {0: (1,)})
    await cluster.set_isr("t", (1, 2, 4))
    state = await cluster.wait_state("t", lambda s: s.leader != 1)
    assert (state.leader, state.isr) == (2, (2, 4))


async def test_invalid_reassignments_are_refused_per_partition(cluster: Cluster) -> None:
    controller = await started(cluster)
    await cluster.stop(4)
    await cluster.wait_state("t", lambda s: 4 not in s.isr, partition=1)
    results = await controller.alter_partition_reassignments(
        {
            tp("t"): (),
            tp("t", 1): (3, 3),
            tp("t", 5): (1, 2),
            tp("nope"): (1,),
        },
        True,
    )
    assert code(results[tp("t")]) == ErrorCode.invalid_replica_assignment
    assert code(results[tp("t", 1)]) == ErrorCode.invalid_replica_assignment
    assert code(results[tp("t", 5)]) == ErrorCode.unknown_topic_or_partition
    assert code(results[tp("nope")]) == ErrorCode.unknown_topic_or_partition
    # A replica on a broker that is not alive, and a negative id.
    results = await controller.alter_partition_reassignments({tp("t"): (1, 4)}, True)
    assert "not alive" in str(results[tp("t")])
    results = await controller.alter_partition_reassignments({tp("t"): (1, -2)}, True)
    assert code(results[tp("t")]) == ErrorCode.invalid_replica_assignment
    # KIP-860: a changed replication factor only when allowed.
    results = await controller.alter_partition_reassignments({tp("t"): (1, 2, 3)}, False)
    assert code(results[tp("t")]) == ErrorCode.invalid_replication_factor
    assert (await cluster.assignment("t")).partitions[0] == (1, 2)


async def test_only_the_active_controller_reassigns(cluster: Cluster) -> None:
    await started(cluster)
    passive = cluster.controllers[2]
    with pytest.raises(NotControllerError):
        await passive.alter_partition_reassignments({tp("t"): (2, 3)}, True)
    with pytest.raises(NotControllerError):
        await passive.list_partition_reassignments(None)


async def test_listing_names_only_partitions_being_reassigned(cluster: Cluster) -> None:
    controller = await started(cluster)
    await controller.alter_partition_reassignments({tp("t", 1): (4, 1)}, True)
    listed = await controller.list_partition_reassignments([tp("t"), tp("t", 1), tp("x")])
    assert list(listed) == [tp("t", 1)]
    assert listed[tp("t", 1)].replicas == (4, 1, 3)


async def test_a_new_controller_finishes_the_reassignment(cluster: Cluster) -> None:
    controller = await started(cluster)
    await controller.alter_partition_reassignments({tp("t"): (2, 3)}, True)
    await cluster.stop(controller.node_id)
    successor = await cluster.wait_active()
    assert successor is not controller
    assert list(await successor.list_partition_reassignments(None)) == [tp("t")]
    await cluster.set_isr("t", (2, 3))
    assignment = await _assignment_when(cluster, lambda a: a.partitions[0] == (2, 3))
    assert (assignment.adding_replicas, assignment.removing_replicas) == ({}, {})
    state = await cluster.state("t")
    assert state is not None and (state.leader, state.isr) == (2, (2, 3))


async def _assignment_when(
    cluster: Cluster, check: Callable[[zk.TopicAssignment], bool]
) -> zk.TopicAssignment:
    async def holds() -> bool:
        return check(await cluster.assignment("t"))

    await eventually(holds)
    return await cluster.assignment("t")
