"""ZkAlterPartitionManager: a leader's ISR change as a conditional set of the partition
state znode, on the local store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.local_store import LocalMetadataStore
from tiercel.server.partition import PartitionState
from tiercel.server.replication.alter_partition import ZkAlterPartitionManager
from tiercel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
PATH = zk.partition_state_path("t", 0)
REPLICAS = (1, 2, 3)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LocalMetadataStore]:
    s = LocalMetadataStore(tmp_path)
    await s.start()
    yield s
    await s.close()


async def _controller_write(store: LocalMetadataStore, state: PartitionState) -> PartitionState:
    if await store.exists(PATH) is None:
        await store.create(PATH, zk.encode_partition_state(state), make_parents=True)
        return replace(state, partition_epoch=0)
    stat = await store.set(PATH, zk.encode_partition_state(state))
    return replace(state, partition_epoch=stat.version)


async def test_the_leader_writes_at_the_version_it_saw(store: LocalMetadataStore) -> None:
    state = await _controller_write(store, PartitionState(1, 4, (1, 2, 3), REPLICAS, 0, 7))
    proposed = replace(state, isr=(1, 2))
    stored = await ZkAlterPartitionManager(store).submit(TP, proposed)
    assert stored == replace(proposed, partition_epoch=1)
    data, stat = await store.get(PATH)
    assert stat.version == 1
    assert json.loads(data) == {
        "version": 1,
        "controller_epoch": 7,
        "leader": 1,
        "leader_epoch": 4,
        "isr": [1, 2],
        "leader_recovery_state": 0,
    }


async def test_a_lost_compare_and_set_returns_what_won(store: LocalMetadataStore) -> None:
    state = await _controller_write(store, PartitionState(1, 4, (1, 2, 3), REPLICAS))
    controller = await _controller_write(store, replace(state, leader_epoch=5, isr=(1, 3)))
    stored = await ZkAlterPartitionManager(store).submit(TP, replace(state, isr=(1, 2)))
    assert stored == controller
    assert zk.decode_partition_state((await store.get(PATH))[0], REPLICAS, 1) == controller


async def test_a_deleted_partition_answers_none(store: LocalMetadataStore) -> None:
    state = PartitionState(1, 4, (1, 2), REPLICAS)
    assert await ZkAlterPartitionManager(store).submit(TP, state) is None
    created = await _controller_write(store, state)
    await store.delete(PATH)
    assert await ZkAlterPartitionManager(store).submit(TP, replace(created, isr=(1,))) is None
