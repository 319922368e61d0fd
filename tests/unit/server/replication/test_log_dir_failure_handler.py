"""The broker's log-dir failure handling (Kafka's ReplicaManager.handleLogDirFailure):
after real I/O errors in one of two log dirs, that dir's partitions answer
KAFKA_STORAGE_ERROR to produce and fetch and are not recreated by metadata, the store
carries the log-dir event, the other dir keeps serving; when the last dir fails the
broker halts with exit code 1."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from replication_support import CONFIG, TOPIC_ID, StateStore, batch, values

from tiercel.config.broker_config import BrokerConfig
from tiercel.protocol.errors import ErrorCode
from tiercel.server.delayed_fetch import FetchRequestPartition
from tiercel.server.log_dir_failure_handler import LogDirFailureHandler, StoreLogDirEvents
from tiercel.server.metadata.local_store import LocalMetadataStore
from tiercel.server.metadata.log_dir_event import LOG_DIR_EVENT_NOTIFICATION_PATH, LogDirEvent
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.partition import PartitionState
from tiercel.server.replica_manager import ReplicaManager
from tiercel.storage.log_manager import LogManager
from tiercel.storage.log_values import FetchIsolation
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@dataclass
class Broker:
    rm: ReplicaManager
    log_manager: LogManager
    store: LocalMetadataStore
    handler: LogDirFailureHandler
    halted: list[int]
    dirs: tuple[Path, Path]

    async def apply(self) -> None:
        states = {p: PartitionState(1, 0, (1,), (1,)) for p in (0, 1)}
        await self.rm.on_topic("t", TopicMetadata("t", TOPIC_ID, {0: (1,), 1: (1,)}, states))

    async def produce(self, tp: TopicPartition) -> ErrorCode | None:
        results = await self.rm.append_records(5000, 1, {tp: batch(values(2))})
        error = results[tp].error
        return None if error is None else error.error_code

    async def fetch(self, tp: TopicPartition) -> ErrorCode | None:
        request = FetchRequestPartition(tp, 0, 1 << 20, None)
        (result,) = await self.rm.fetch_messages(
            [request], 0, 1, 1 << 20, FetchIsolation.HIGH_WATERMARK
        )
        return None if result.error is None else result.error.error_code


@pytest.fixture
async def broker(tmp_path: Path, scheduler: Scheduler) -> AsyncIterator[Broker]:
    dirs = (tmp_path / "a", tmp_path / "b")
    config = BrokerConfig({"node.id": 1, "log.dirs": [str(d) for d in dirs]})
    log_manager = LogManager(config, scheduler, lambda topic: CONFIG)
    await log_manager.startup(None)
    store = LocalMetadataStore(tmp_path / "store")
    await store.start()
    rm = ReplicaManager(
        config, 1, log_manager, scheduler, lambda topic: CONFIG, MetadataCache(1, "c"), StateStore()
    )
    halted: list[int] = []
    handler = LogDirFailureHandler(1, log_manager, rm, StoreLogDirEvents(store), halted.append)
    handler.startup()
    yield Broker(rm, log_manager, store, handler, halted, dirs)
    await handler.shutdown()
    rm.shutdown()
    await rm.fetcher_manager.shutdown()
    await log_manager.shutdown()
    await store.close()


def fail_writes_under(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_writev = os.writev
    prefix = str(directory) + "/"

    def writev(fd: int, buffers: object) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(prefix):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_writev(fd, buffers)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "writev", writev)


async def until(condition: object, timeout: float = 5.0) -> None:
    async def wait() -> None:
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.01)

    await asyncio.wait_for(wait(), timeout)


async def test_a_failed_dir_takes_its_partitions_offline_and_the_other_keeps_serving(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    await broker.apply()
    a, b = broker.dirs
    assert broker.rm.partitions[T0].log.parent_dir == str(a)
    assert broker.rm.partitions[T1].log.parent_dir == str(b)
    assert await broker.produce(T0) is None and await broker.produce(T1) is None

    fail_writes_under(a, monkeypatch)
    assert await broker.produce(T0) == ErrorCode.kafka_storage_error
    await until(lambda: T0 in broker.rm.offline_partitions)
    assert await broker.produce(T0) == ErrorCode.kafka_storage_error
    assert await broker.fetch(T0) == ErrorCode.kafka_storage_error
    assert broker.log_manager.log_dirs == [str(b)] and T0 not in broker.log_manager.logs
    await broker.apply()  # metadata again: the offline replica is not recreated
    assert T0 not in broker.rm.partitions and not (b / "t-0").exists()
    assert await broker.produce(T1) is None and await broker.fetch(T1) is None

    (name,) = await broker.store.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH)
    data, _ = await broker.store.get(f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{name}")
    assert LogDirEvent.decode(data) == LogDirEvent(1, str(a), (T0,))
    assert broker.halted == []

    fail_writes_under(b, monkeypatch)
    assert await broker.produce(T1) == ErrorCode.kafka_storage_error
    await until(lambda: broker.halted == [1])
