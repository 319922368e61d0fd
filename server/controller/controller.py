"""Controller: the one broker that turns topic assignments into partition leadership.

Event-loop only. Election is an ephemeral ``/controller`` node: whoever creates it is
controller until its session ends; the others watch the node and try again when it goes.
Each new controller bumps ``/controller_epoch``. The active controller

- gives every new partition its first state: leader = first live replica in assignment
  order, ISR = the live replicas, leader epoch 0;
- carries out deletion requests under ``/admin/delete_topics``.

Every state write is conditional (create-if-absent here), so two controllers racing
through a handover cannot both win. Leader failover, ISR changes and reassignment come
with multi-broker clusters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from config.log_format import log_event
from server.metadata import zk_data as zk
from server.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    WatchHandle,
)
from server.partition import PartitionState

_log: Final = logging.getLogger("tiercel.controller")


class Controller:
    def __init__(self, node_id: int, store: MetadataStore) -> None:
        self.node_id = node_id
        self._store = store
        self.epoch = 0
        self.is_active = False
        self._watches: list[WatchHandle] = []
        # Per topic: its assignment node, so partitions added later get a leader too.
        self._topic_watches: dict[str, WatchHandle] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def startup(self) -> None:
        self._watches.append(await self._store.watch_data(zk.CONTROLLER_PATH, self._poke))
        self._watches.append(await self._store.watch_children(zk.TOPICS_PATH, self._poke))
        self._watches.append(await self._store.watch_children(zk.DELETE_TOPICS_PATH, self._poke))
        await self._elect()
        await self._reconcile()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")

    async def shutdown(self) -> None:
        for handle in [*self._watches, *self._topic_watches.values()]:
            handle.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.is_active:
            with contextlib.suppress(NoNodeError):
                await self._store.delete(zk.CONTROLLER_PATH)
            self.is_active = False

    def _poke(self, _: object = None) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                if not self.is_active:
                    await self._elect()
                await self._reconcile()
            except Exception as e:
                log_event(_log, logging.ERROR, "controller_error", reason=repr(e))
                await asyncio.sleep(0.5)
                self._wake.set()

    async def _elect(self) -> None:
        try:
            await self._store.create(
                zk.CONTROLLER_PATH, zk.encode_controller(self.node_id), ephemeral=True
            )
        except NodeExistsError:
            data, _ = await self._store.get(zk.CONTROLLER_PATH)
            self.is_active = zk.decode_controller(data) == self.node_id
            return
        self.epoch = await self._bump_controller_epoch()
        self.is_active = True
        log_event(
            _log,
            logging.INFO,
            "controller_elected",
            node_id=self.node_id,
            controller_epoch=self.epoch,
        )

    async def _bump_controller_epoch(self) -> int:
        try:
            data, stat = await self._store.get(zk.CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            await self._store.create(zk.CONTROLLER_EPOCH_PATH, b"1")
            return 1
        epoch = int(data) + 1
        await self._store.set(
            zk.CONTROLLER_EPOCH_PATH, str(epoch).encode(), expected_version=stat.version
        )
        return epoch

    async def _reconcile(self) -> None:
        if not self.is_active:
            return
        for topic in await self._store.get_children(zk.DELETE_TOPICS_PATH):
            await self._delete_topic(topic)
        topics = set(await self._store.get_children(zk.TOPICS_PATH))
        for gone in self._topic_watches.keys() - topics:
            self._topic_watches.pop(gone).cancel()
        for topic in sorted(topics):
            if topic not in self._topic_watches:
                self._topic_watches[topic] = await self._store.watch_data(
                    zk.topic_path(topic), self._poke
                )
            await self._initialize_partitions(topic)

    async def _live_brokers(self) -> set[int]:
        return {int(b) for b in await self._store.get_children(zk.BROKER_IDS_PATH)}

    async def _initialize_partitions(self, topic: str) -> None:
        try:
            data, _ = await self._store.get(zk.topic_path(topic))
        except NoNodeError:
            return
        assignment = zk.TopicAssignment.decode(data)
        live = await self._live_brokers()
        for partition, replicas in sorted(assignment.partitions.items()):
            state_path = zk.partition_state_path(topic, partition)
            if await self._store.exists(state_path) is not None:
                continue
            isr = tuple(r for r in replicas if r in live)
            state = PartitionState(
                leader=isr[0] if isr else -1,
                leader_epoch=0,
                isr=isr or replicas,
                replicas=replicas,
                controller_epoch=self.epoch,
            )
            try:
                await self._store.create(
                    state_path, zk.encode_partition_state(state), make_parents=True
                )
            except NodeExistsError:
                continue
            log_event(
                _log,
                logging.INFO,
                "partition_initialized",
                topic=topic,
                partition=partition,
                leader=state.leader,
                isr=list(state.isr),
            )

    async def _delete_topic(self, topic: str) -> None:
        for path in (zk.topic_path(topic), zk.topic_config_path(topic)):
            with contextlib.suppress(NoNodeError):
                await self._store.delete(path, recursive=True)
        with contextlib.suppress(NoNodeError):
            await self._store.delete(zk.delete_topic_path(topic))
        log_event(_log, logging.INFO, "topic_deleted", topic=topic)
