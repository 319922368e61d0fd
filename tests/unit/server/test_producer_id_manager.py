"""ProducerIdManager: blocks of 1000 ids in Kafka's /latest_producer_id_block document,
taken by compare-and-set so that brokers racing for blocks, and restarts, never repeat
an id."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tiercel.protocol.errors import CoordinatorLoadInProgressError, KafkaError
from tiercel.server.coordinator.transaction.producer_id_manager import (
    PRODUCER_ID_BLOCK_PATH,
    ProducerIdManager,
    ProducerIdsBlock,
)
from tiercel.server.metadata.local_store import LocalMetadataStore
from tiercel.server.metadata.store import MetadataStoreError


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LocalMetadataStore]:
    s = LocalMetadataStore(tmp_path)
    await s.start()
    yield s
    await s.close()


async def block_document(store: LocalMetadataStore) -> dict[str, object]:
    data, _ = await store.get(PRODUCER_ID_BLOCK_PATH)
    doc = json.loads(data)
    assert isinstance(doc, dict)
    return doc


async def test_ids_come_from_consecutive_blocks_of_a_thousand(store: LocalMetadataStore) -> None:
    manager = ProducerIdManager(3, store)
    ids = [await manager.generate_producer_id() for _ in range(1001)]
    assert ids == list(range(1001))
    data, _ = await store.get(PRODUCER_ID_BLOCK_PATH)
    # Kafka's layout, ids as strings, in Kafka's key order.
    assert data == b'{"version":1,"broker":3,"block_start":"1000","block_end":"1999"}'


async def test_an_empty_node_means_no_block_yet(store: LocalMetadataStore) -> None:
    await store.create(PRODUCER_ID_BLOCK_PATH)  # Kafka creates it empty at start-up
    assert await ProducerIdManager(1, store).generate_producer_id() == 0
    assert (await block_document(store))["block_end"] == "999"


async def test_a_restart_never_reuses_the_rest_of_a_block(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path)
    await store.start()
    assert await ProducerIdManager(1, store).generate_producer_id() == 0
    await store.close()
    store = LocalMetadataStore(tmp_path)
    await store.start()
    assert await ProducerIdManager(1, store).generate_producer_id() == 1000
    await store.close()


async def test_brokers_racing_for_blocks_never_share_one(store: LocalMetadataStore) -> None:
    managers = [ProducerIdManager(broker, store) for broker in range(4)]

    async def take(manager: ProducerIdManager) -> list[int]:
        ids = []
        for _ in range(2500):
            ids.append(await manager.generate_producer_id())
            await asyncio.sleep(0)
        return ids

    results = await asyncio.gather(*(take(m) for m in managers))
    every = [i for ids in results for i in ids]
    assert len(every) == len(set(every)) == 10_000
    for ids in results:
        assert ids == sorted(ids)
    assert int(str((await block_document(store))["block_end"])) == 11_999


async def test_concurrent_requests_on_one_broker_take_one_block(
    store: LocalMetadataStore,
) -> None:
    manager = ProducerIdManager(1, store)
    ids = await asyncio.gather(*(manager.generate_producer_id() for _ in range(50)))
    assert sorted(ids) == list(range(50))
    assert (await block_document(store))["block_start"] == "0"


async def test_a_lost_race_reads_the_winners_block_and_tries_again(
    store: LocalMetadataStore,
) -> None:
    manager = ProducerIdManager(1, store)
    real_set = store.set
    raced = False

    async def racing_set(path: str, data: bytes, *, expected_version: int = -1) -> object:
        nonlocal raced
        if not raced:
            raced = True  # another broker takes 1000-1999 first
            await real_set(path, ProducerIdsBlock(2, 1000, 1000).encode())
        return await real_set(path, data, expected_version=expected_version)

    await manager.generate_producer_id()  # block 0-999, created
    manager._block = ProducerIdsBlock(1, 0, 1)  # used up
    store.set = racing_set  # type: ignore[method-assign]
    assert await manager.generate_producer_id() == 2000
    assert (await block_document(store))["broker"] == 1


async def test_store_failures_are_retriable(store: LocalMetadataStore) -> None:
    async def broken_get(path: str) -> tuple[bytes, object]:
        raise MetadataStoreError("disk on fire")

    store.get = broken_get  # type: ignore[method-assign]
    with pytest.raises(CoordinatorLoadInProgressError):
        await ProducerIdManager(1, store).generate_producer_id()


async def test_exhausting_every_id_is_an_error(store: LocalMetadataStore) -> None:
    await store.create(PRODUCER_ID_BLOCK_PATH, ProducerIdsBlock(1, 2**63 - 1000, 1000).encode())
    with pytest.raises(KafkaError, match="exhausted"):
        await ProducerIdManager(1, store).generate_producer_id()


def test_block_documents_round_trip() -> None:
    block = ProducerIdsBlock(7, 123_456_000, 1000)
    assert ProducerIdsBlock.decode(block.encode()) == block
    assert block.last_producer_id == 123_456_999
    with pytest.raises(ValueError):
        ProducerIdsBlock.decode(b"[1, 2]")
