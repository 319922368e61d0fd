"""Loading __consumer_offsets partitions: bad records and leader-epoch changes."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest
from group_support import (
    Clock,
    FakeReplicaManager,
    coordinator_config,
    metadata_cache,
    start_coordinator,
)

from tiercel.protocol.errors import CoordinatorLoadInProgressError
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.coordinator.group.group_coordinator import GroupCoordinator
from tiercel.server.coordinator.group.group_metadata_manager import GroupMetadataManager
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata
from tiercel.server.replica_manager import ReplicaManager
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition


@pytest.fixture
async def scheduler() -> Scheduler:
    return Scheduler(asyncio.get_running_loop(), 2)


async def test_an_undecodable_record_does_not_cost_the_other_offsets(
    scheduler: Scheduler,
) -> None:
    replicas = FakeReplicaManager()
    first = await start_coordinator(replicas, scheduler, coordinator_config(), Clock())
    tp = TopicPartition("t", 0)
    offsets = {tp: OffsetAndMetadata(42, -1, "", 1, None)}
    await first.commit_offsets("g", "", None, -1, offsets, 8)
    await first.shutdown()
    # A record the loader cannot decode (it has no key) lands after the commit.
    replicas.log_for("g", first.manager).append(
        build_record_batch([SimpleRecord(None, b"x", timestamp=1)])
    )
    second = await start_coordinator(replicas, scheduler, coordinator_config(), Clock())
    _, got = second.fetch_offsets("g", [tp])
    assert got[tp].committed_offset == 42
    await second.shutdown()


async def test_a_new_leader_epoch_during_a_load_restarts_it(scheduler: Scheduler) -> None:
    replicas = FakeReplicaManager()
    config = coordinator_config()
    manager = GroupMetadataManager(
        config, cast(ReplicaManager, replicas), metadata_cache(), scheduler, Clock()
    )
    coordinator = GroupCoordinator(config, manager, scheduler)
    coordinator.startup()
    tp = next(iter(replicas.partitions))
    coordinator.on_leadership_change(tp, 0)
    coordinator.on_leadership_change(tp, 1)  # still leader, new epoch, load not done
    group = next(
        g for g in (f"g{i}" for i in range(1000)) if manager.partition_for(g) == tp.partition
    )
    for _ in range(400):
        try:
            coordinator.validate_group_status(group)
            break
        except CoordinatorLoadInProgressError:
            await asyncio.sleep(0.005)
    else:
        pytest.fail("the partition stayed COORDINATOR_LOAD_IN_PROGRESS")
    await coordinator.shutdown()
