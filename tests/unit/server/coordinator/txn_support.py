"""A transaction coordinator on an in-memory __transaction_state, for the coordinator
unit tests: the real TransactionCoordinator and TransactionStateManager over
`FakeReplicaManager`, with the marker channel and the producer id allocator played by
the test.

`FakeReplicaManager.hold` holds a write's answer after the leader's local append, the
way an acks=-1 write waits for its followers, so a test can run other requests while a
coordinator pass waits on one of its writes; `Ids.hold` does the same for a producer
id allocation.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from group_support import FakePartition, FakeReplicaManager

from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.coordinator.coordinator_partition import partition_for
from tiercel.server.coordinator.transaction.transaction_config import (
    TRANSACTION_STATE_TOPIC_NAME,
    TransactionConfig,
)
from tiercel.server.coordinator.transaction.transaction_coordinator import (
    TransactionCoordinator,
)
from tiercel.server.coordinator.transaction.transaction_log import (
    TransactionLogValue,
    encode_key,
    encode_value,
)
from tiercel.server.coordinator.transaction.transaction_marker_channel import (
    TransactionMarkerChannelManager,
)
from tiercel.server.coordinator.transaction.transaction_metadata import (
    TransactionMetadata,
    TxnTransitMetadata,
)
from tiercel.server.coordinator.transaction.transaction_state_loader import parse_chunk
from tiercel.server.coordinator.transaction.transaction_state_manager import (
    TransactionStateManager,
)
from tiercel.server.metadata.metadata_cache import MetadataCache
from tiercel.server.replica_manager import ReplicaManager
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

PARTITIONS = 4
LOAD_TIMEOUT_S = 10.0


class Markers:
    """Records what the coordinator asks to send; `finish` plays the channel's part."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, TransactionMetadata, TxnTransitMetadata]] = []

    def add_txn_markers_to_send(
        self, epoch: int, metadata: TransactionMetadata, transit: TxnTransitMetadata, _: Any
    ) -> None:
        self.sent.append((epoch, metadata, transit))

    async def finish(self, manager: TransactionStateManager) -> None:
        """Every partition has the last transaction's markers: write its completion."""
        epoch, metadata, transit = self.sent[-1]
        await manager.append_transaction_to_log(metadata.transactional_id, epoch, transit)

    async def shutdown(self) -> None:
        return None


class Ids:
    """Producer ids from 1001 on; `hold` makes the next allocation wait for its event
    (a new block of ids being fetched)."""

    def __init__(self) -> None:
        self.next = 1000
        self.waiting = asyncio.Event()
        self._gate: asyncio.Event | None = None

    def hold(self) -> asyncio.Event:
        self._gate = release = asyncio.Event()
        return release

    async def __call__(self) -> int:
        gate, self._gate = self._gate, None
        if gate is not None:
            self.waiting.set()
            await gate.wait()
        self.next += 1
        return self.next


def txn_replicas() -> FakeReplicaManager:
    """Leader of every __transaction_state partition (and of nothing else)."""
    replicas = FakeReplicaManager()
    replicas.partitions = {
        TopicPartition(TRANSACTION_STATE_TOPIC_NAME, p): FakePartition() for p in range(PARTITIONS)
    }
    return replicas


def txn_tp(transactional_id: str) -> TopicPartition:
    """The id's __transaction_state partition."""
    return TopicPartition(TRANSACTION_STATE_TOPIC_NAME, partition_for(transactional_id, PARTITIONS))


def ids_in_one_partition(count: int) -> list[str]:
    """``count`` transactional ids of the same __transaction_state partition, in the
    order a pass over that partition meets them once each has been initialized."""
    ids = [f"id-{i}" for i in range(1000)]
    first = partition_for(ids[0], PARTITIONS)
    return [i for i in ids if partition_for(i, PARTITIONS) == first][:count]


async def coordinator(
    replicas: FakeReplicaManager,
    scheduler: Scheduler,
    epoch: int = 0,
    ids: Ids | None = None,
) -> tuple[TransactionCoordinator, Markers]:
    config = TransactionConfig(transaction_state_log_num_partitions=PARTITIONS)
    manager = TransactionStateManager(
        config, cast(ReplicaManager, replicas), MetadataCache(1, "c"), scheduler
    )
    markers = Markers()
    coord = TransactionCoordinator(
        manager, cast(TransactionMarkerChannelManager, markers), ids or Ids(), scheduler
    )
    coord.startup()
    for tp in replicas.partitions:
        coord.on_leadership_change(tp, epoch)
    await loaded(manager)
    return coord, markers


async def loaded(manager: TransactionStateManager) -> None:
    """Wait (bounded) until no partition is being loaded."""
    async with asyncio.timeout(LOAD_TIMEOUT_S):
        while manager.is_loading:
            await asyncio.sleep(0.001)


def txn_records(
    replicas: FakeReplicaManager, tp: TopicPartition
) -> list[tuple[str, TransactionLogValue | None]]:
    """(transactional id, value; None for a tombstone) of every record in the log."""
    return parse_chunk(bytes(replicas.partitions[tp].log.data)).records


def write_txn_record(
    replicas: FakeReplicaManager,
    tp: TopicPartition,
    transactional_id: str,
    value: TransactionLogValue,
) -> None:
    """Put a record in the log as an earlier coordinator wrote it."""
    record = SimpleRecord(encode_key(transactional_id), encode_value(value), timestamp=1)
    replicas.partitions[tp].log.append(build_record_batch([record]))
