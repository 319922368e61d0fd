"""A transaction marker reaching a __consumer_offsets partition while its new leader
still loads the partition's groups (the transaction and group coordinators of a
SIGKILLed broker fail over to the same broker together; the new transaction
coordinator resends a prepared commit's markers at once).

Written then, the marker could land after the load's last read: the load installed the
producer's offsets as pending and the marker had found nothing to complete, so a
committed transaction's offsets stayed pending (OffsetFetch with require_stable
answering UNSTABLE_OFFSET_COMMIT) until the producer's next marker. The WriteTxnMarkers
handler now answers NOT_LEADER_OR_FOLLOWER until the groups are loaded, as Kafka 4's
group coordinator refuses completeTransaction, and the transaction coordinator retries.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar, cast

import pytest
from group_support import (
    Clock,
    FakePartition,
    FakeReplicaManager,
    coordinator_config,
    metadata_cache,
)

from tiercel.protocol.end_txn_marker import build_end_txn_marker_batch
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.coordinator.group.coordinator_records import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)
from tiercel.server.coordinator.group.group_config import GROUP_METADATA_TOPIC_NAME
from tiercel.server.coordinator.group.group_coordinator import GroupCoordinator
from tiercel.server.coordinator.group.group_metadata_manager import GroupMetadataManager
from tiercel.server.handlers import write_txn_markers
from tiercel.server.replica_manager import LeaderAppend, ProduceResult, ReplicaManager
from tiercel.server.request_context import RequestContext
from tiercel.storage.log_transactions import EndTxnMarkerEntry
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

T = TypeVar("T")
GROUP = "g"
INPUT = TopicPartition("in", 0)
PRODUCER_ID = 7


class MarkerPartition(FakePartition):
    """Appends a marker's control batch to the in-memory log, as Partition does."""

    def append_end_txn_marker(self, entry: EndTxnMarkerEntry, now: int) -> Any:
        batch = build_end_txn_marker_batch(
            entry.marker, entry.producer_id, entry.producer_epoch, timestamp=now
        )
        return types.SimpleNamespace(first_offset=self.log.append(batch))


class MarkerReplicaManager(FakeReplicaManager):
    async def append_to_leaders(
        self, timeout_ms: int, required_acks: int, appends: dict[TopicPartition, LeaderAppend]
    ) -> dict[TopicPartition, ProduceResult]:
        results = {}
        for tp, append in appends.items():
            partition = cast(Any, self.partitions[tp])
            results[tp] = ProduceResult(info=await append(tp, partition, 1, required_acks))
        return results


class GatedScheduler(Scheduler):
    """Holds every executor job (the load's decoding of a chunk it has read) until
    ``release`` is set, and tells when one is waiting."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop, 1)
        self.waiting = asyncio.Event()
        self.release = asyncio.Event()

    def run_blocking(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        async def gated() -> T:
            self.waiting.set()
            await self.release.wait()
            return await super(GatedScheduler, self).run_blocking(fn, *args)

        return asyncio.ensure_future(gated())


@pytest.fixture
async def gated() -> AsyncIterator[GatedScheduler]:
    s = GatedScheduler(asyncio.get_running_loop())
    yield s
    s.release.set()
    await s.drain()
    s.shutdown()


def txn_offset_commit(offset: int) -> bytes:
    """The producer's TxnOffsetCommit record, as the old coordinator wrote it."""
    record = SimpleRecord(
        encode_key(OffsetCommitKey(GROUP, INPUT.topic, INPUT.partition)),
        encode_offset_commit_value(OffsetCommitValue(offset, -1, "", 1, -1)),
        timestamp=1,
    )
    return build_record_batch(
        [record], producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=0, is_transactional=True
    )


def commit_marker_request(offsets_partition: int) -> Any:
    topic = types.SimpleNamespace(
        name=GROUP_METADATA_TOPIC_NAME, partition_indexes=[offsets_partition]
    )
    marker = types.SimpleNamespace(
        producer_id=PRODUCER_ID,
        producer_epoch=0,
        transaction_result=True,
        coordinator_epoch=1,
        topics=[topic],
    )
    return types.SimpleNamespace(markers=[marker])


def marker_error(response: dict[str, Any]) -> ErrorCode:
    [marker] = response["markers"]
    [topic] = marker["topics"]
    [partition] = topic["partitions"]
    return ErrorCode(partition["error_code"])


async def test_a_commit_marker_sent_during_the_load_commits_the_offsets(
    gated: GatedScheduler,
) -> None:
    replicas = MarkerReplicaManager()
    config = coordinator_config()
    manager = GroupMetadataManager(
        config, cast(ReplicaManager, replicas), metadata_cache(), gated, Clock()
    )
    coordinator = GroupCoordinator(config, manager, gated)
    coordinator.startup()
    offsets_tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, manager.partition_for(GROUP))
    replicas.partitions[offsets_tp] = MarkerPartition()
    replicas.partitions[offsets_tp].log.append(txn_offset_commit(20))
    ctx = cast(
        RequestContext,
        types.SimpleNamespace(
            broker=types.SimpleNamespace(replica_manager=replicas, group_coordinator=coordinator),
            authorizer=None,  # no authorizer: WriteTxnMarkers is not checked
        ),
    )
    request = commit_marker_request(offsets_tp.partition)

    try:
        coordinator.on_leadership_change(offsets_tp, 1)
        await gated.waiting.wait()  # the load has read the log up to here
        errors = [marker_error(await write_txn_markers.handle(ctx, request))]
        gated.release.set()
        while manager.is_loading:
            await asyncio.sleep(0.001)
        # The transaction coordinator resends a marker until it is written.
        if errors[-1] is not ErrorCode.none:
            errors.append(marker_error(await write_txn_markers.handle(ctx, request)))

        assert errors in ([ErrorCode.none], [ErrorCode.not_leader_or_follower, ErrorCode.none])
        error, offsets = coordinator.fetch_offsets(GROUP, [INPUT])
        assert error is ErrorCode.none
        committed = offsets[INPUT]
        assert committed is not None and committed.committed_offset == 20
        assert not manager.txn_offsets.is_pending(GROUP, INPUT)
    finally:
        await coordinator.shutdown()
