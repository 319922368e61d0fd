"""ControllerStore: the active controller's reads and fenced writes of the MetadataStore.

Kafka's ZooKeeper controller fences every write with the controller epoch: each write is
a transaction whose first op checks /controller_epoch at the version this controller's
election left it at, so once another broker has been elected (and bumped the epoch) a
deposed controller's writes all fail. The same holds here; such a failure raises
ControllerMovedError. Partition states are also written at the version read
(compare-and-set), because partition leaders change ISRs concurrently: on a version
conflict the state is read again and the change recomputed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, TypeVar

from tiercel.server.metadata import zk_data as zk
from tiercel.server.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    MetadataStore,
    MetadataStoreError,
    NodeExistsError,
    NoNodeError,
    Op,
    SetOp,
    Stat,
)
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition

# Conflicts with leaders' ISR writes are rare and short; this many in a row means
# something keeps rewriting the state, and the controller retries the whole event later.
_MAX_ATTEMPTS: Final = 20

_T = TypeVar("_T")
StateChange = Callable[[TopicPartition, PartitionState], PartitionState | None]


class ControllerMovedError(Exception):
    """Another broker became controller: this one's epoch is stale and it must resign."""


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """The outcome of a conditional partition state change: the latest state (None when
    the partition has no state node) and whether this change was written."""

    state: PartitionState | None
    written: bool


async def gather_all(jobs: Sequence[Awaitable[_T]]) -> list[_T]:
    """Run `jobs` concurrently (their store round trips overlap) and let every one finish
    before raising the first failure, so no write is left running behind the caller."""
    results = await asyncio.gather(*jobs, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


class ControllerStore:
    """Reads and epoch-fenced writes for one controller epoch.

    Invariants: `epoch` and `epoch_zk_version` are the value and znode version of
    /controller_epoch that this controller's election wrote; they never change (a new
    election makes a new ControllerStore). Event-loop only.
    """

    def __init__(self, store: MetadataStore, epoch: int, epoch_zk_version: int) -> None:
        self.store = store
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version

    async def _fenced(self, ops: list[Op]) -> list[Stat | str | None]:
        """Apply `ops` after the controller epoch check; raises ControllerMovedError
        when the check fails, else the failing op's error."""
        check = CheckOp(zk.CONTROLLER_EPOCH_PATH, self.epoch_zk_version)
        try:
            return (await self.store.multi([check, *ops]))[1:]
        except (BadVersionError, NoNodeError) as e:
            if e.op_index == 0:
                raise ControllerMovedError(f"controller epoch {self.epoch} is stale") from e
            raise

    # -- partition states --------------------------------------------------------------

    async def read_state(
        self, tp: TopicPartition, replicas: tuple[int, ...]
    ) -> PartitionState | None:
        try:
            data, stat = await self.store.get(zk.partition_state_path(tp.topic, tp.partition))
        except NoNodeError:
            return None
        state = zk.decode_partition_state(data, replicas, stat.version)
        if state.controller_epoch > self.epoch:
            # Kafka's "LeaderAndIsr path was already written by another controller".
            raise ControllerMovedError(
                f"{tp} was written by controller epoch {state.controller_epoch}"
            )
        return state

    async def read_states(
        self, replicas: Mapping[TopicPartition, tuple[int, ...]]
    ) -> dict[TopicPartition, PartitionState]:
        """The states of the partitions that have one."""
        items = list(replicas.items())
        states = await gather_all([self.read_state(tp, r) for tp, r in items])
        return {tp: s for (tp, _), s in zip(items, states, strict=True) if s is not None}

    async def create_state(self, tp: TopicPartition, state: PartitionState) -> bool:
        """A new partition's first state; False if it has one already or its topic is gone."""
        partitions = f"{zk.topic_path(tp.topic)}/partitions"
        try:
            for path in (partitions, zk.partition_path(tp.topic, tp.partition)):
                # Not make_parents: that would re-create the node of a topic just deleted.
                with contextlib.suppress(NodeExistsError):
                    await self.store.create(path)
            data = zk.encode_partition_state(replace(state, controller_epoch=self.epoch))
            await self._fenced([CreateOp(zk.partition_state_path(tp.topic, tp.partition), data)])
        except (NodeExistsError, NoNodeError):
            return False
        return True

    async def update_state(
        self, tp: TopicPartition, replicas: tuple[int, ...], change: StateChange
    ) -> StateUpdate:
        """Read the state, apply `change` (None: nothing to write) and write the result
        at the version read; on a concurrent write, start over from the new state."""
        path = zk.partition_state_path(tp.topic, tp.partition)
        for _ in range(_MAX_ATTEMPTS):
            current = await self.read_state(tp, replicas)
            if current is None:
                return StateUpdate(None, False)
            new = change(tp, current)
            if new is None:
                return StateUpdate(current, False)
            new = replace(new, controller_epoch=self.epoch)
            op = SetOp(path, zk.encode_partition_state(new), current.partition_epoch)
            try:
                (stat,) = await self._fenced([op])
            except BadVersionError:
                continue
            except NoNodeError:
                return StateUpdate(None, False)
            assert isinstance(stat, Stat)
            return StateUpdate(replace(new, partition_epoch=stat.version), True)
        raise MetadataStoreError(f"the state of {tp} kept changing under the controller")

    async def update_states(
        self, replicas: Mapping[TopicPartition, tuple[int, ...]], change: StateChange
    ) -> dict[TopicPartition, StateUpdate]:
        items = list(replicas.items())
        updates = await gather_all([self.update_state(tp, r, change) for tp, r in items])
        return {tp: u for (tp, _), u in zip(items, updates, strict=True)}

    # -- topics ------------------------------------------------------------------------

    async def write_topic(
        self, topic: str, assignment: zk.TopicAssignment, expected_version: int
    ) -> int:
        """Replace the topic's assignment (compare-and-set); returns the new version.
        Raises BadVersionError or NoNodeError."""
        (stat,) = await self._fenced(
            [SetOp(zk.topic_path(topic), assignment.encode(), expected_version)]
        )
        assert isinstance(stat, Stat)
        return stat.version

    async def delete_topic(self, topic: str) -> None:
        """Remove the topic's nodes, its config and its deletion request in one
        transaction, so brokers see it vanish at once."""
        ops: list[Op] = [DeleteOp(p) for p in await self._subtree(zk.topic_path(topic))]
        for path in (zk.topic_config_path(topic), zk.delete_topic_path(topic)):
            if await self.store.exists(path) is not None:
                ops.append(DeleteOp(path))
        if ops:
            await self._fenced(ops)

    async def delete_request(self, path: str) -> None:
        with contextlib.suppress(NoNodeError):
            await self._fenced([DeleteOp(path)])

    async def _subtree(self, path: str) -> list[str]:
        """`path` and its descendants, children before parents; empty if it is gone."""
        try:
            children = await self.store.get_children(path)
        except NoNodeError:
            return []
        nested = await gather_all([self._subtree(f"{path}/{c}") for c in children])
        return [p for paths in nested for p in paths] + [path]
