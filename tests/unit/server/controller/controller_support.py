"""An in-process cluster for controller tests: several Controllers on one metadata store.

Each "broker" is a Controller plus its ephemeral registration under /brokers/ids, so tests
make brokers come and go by registering and deregistering them; partition leaders' ISR
changes are simulated by conditional writes of the state node, as a leader makes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from tiercel.config.broker_config import BrokerConfig, Listener
from tiercel.server.controller.controller import Controller
from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.local_store import LocalMetadataStore
from tiercel.server.metadata.store import CreateOp, NodeExistsError, NoNodeError
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition

WAIT_S = 5.0


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = WAIT_S) -> None:
    """Poll `check` until it holds; fail after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


class Cluster:
    def __init__(self, store: LocalMetadataStore) -> None:
        self.store = store
        self.controllers: dict[int, Controller] = {}

    @classmethod
    async def open(cls, directory: Path) -> Cluster:
        store = LocalMetadataStore(directory)
        await store.start()
        for path in zk.PERSISTENT_PATHS:
            with contextlib.suppress(NodeExistsError):
                await store.create(path, make_parents=True)
        return cls(store)

    async def close(self) -> None:
        for controller in self.controllers.values():
            await controller.shutdown()
        await self.store.close()

    # -- brokers -----------------------------------------------------------------------

    async def register(self, broker: int) -> None:
        registration = zk.BrokerRegistration(broker, (Listener("PLAINTEXT", "127.0.0.1", broker),))
        await self.store.create(zk.broker_path(broker), registration.encode(), ephemeral=True)

    async def deregister(self, broker: int) -> None:
        with contextlib.suppress(NoNodeError):
            await self.store.delete(zk.broker_path(broker))

    async def start(self, broker: int, **overrides: object) -> Controller:
        """Register the broker and start its controller."""
        await self.register(broker)
        config = BrokerConfig(
            {"node.id": broker, "auto.leader.rebalance.enable": False, **overrides}
        )
        controller = Controller(config, self.store)
        await controller.startup()
        self.controllers[broker] = controller
        return controller

    async def stop(self, broker: int) -> None:
        """A broker leaves: its controller stops, then its registration goes."""
        controller = self.controllers.pop(broker, None)
        if controller is not None:
            await controller.shutdown()
        await self.deregister(broker)

    def active(self) -> Controller | None:
        actives = [c for c in self.controllers.values() if c.is_active]
        assert len(actives) <= 1
        return actives[0] if actives else None

    async def wait_active(self) -> Controller:
        await eventually(lambda: _true(self.active() is not None))
        active = self.active()
        assert active is not None
        return active

    # -- topics and states -------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        replicas: Mapping[int, tuple[int, ...]],
        config: dict[str, str] | None = None,
    ) -> None:
        assignment = zk.TopicAssignment(uuid.uuid4(), dict(replicas))
        await self.store.multi(
            [
                CreateOp(zk.topic_config_path(name), zk.encode_topic_config(config or {})),
                CreateOp(zk.topic_path(name), assignment.encode()),
            ]
        )

    async def assignment(self, name: str) -> zk.TopicAssignment:
        data, _ = await self.store.get(zk.topic_path(name))
        return zk.TopicAssignment.decode(data)

    async def state(self, topic: str, partition: int = 0) -> PartitionState | None:
        try:
            data, stat = await self.store.get(zk.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return zk.decode_partition_state(data, (), stat.version)

    async def wait_state(
        self, topic: str, check: Callable[[PartitionState], bool], partition: int = 0
    ) -> PartitionState:
        async def holds() -> bool:
            s = await self.state(topic, partition)
            return s is not None and check(s)

        await eventually(holds)
        state = await self.state(topic, partition)
        assert state is not None
        return state

    async def set_isr(self, topic: str, isr: tuple[int, ...], partition: int = 0) -> None:
        """What a leader does: change the ISR only, at the version it read."""
        data, stat = await self.store.get(zk.partition_state_path(topic, partition))
        current = zk.decode_partition_state(data, (), stat.version)
        new = PartitionState(
            current.leader, current.leader_epoch, isr, (), controller_epoch=current.controller_epoch
        )
        await self.store.set(
            zk.partition_state_path(topic, partition),
            zk.encode_partition_state(new),
            expected_version=stat.version,
        )

    async def request_shutdown(self, broker: int) -> None:
        await self.store.create(zk.controlled_shutdown_path(broker), ephemeral=True)


def tp(topic: str, partition: int = 0) -> TopicPartition:
    return TopicPartition(topic, partition)


async def _true(value: bool) -> bool:
    return value
