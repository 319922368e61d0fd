"""read_committed reads from the remote tier carry the aborted transactions overlapping
the bytes read, as a local read does (Kafka's RemoteLogManager.addAbortedTransactions /
collectAbortedTransactions), over a real UnifiedLog with committed and aborted
transactions tiered into a LocalTieredStorage: the answers equal the local log's, also
once local retention removed the tiered segments and when an abort is indexed only in a
segment that stayed local."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from support.tiering import (
    drop_local_segments_below,
    open_log,
    scheduler,
    small_config,
    tier_rolled_segments,
    topic_id_partition,
)
from support.txn_log import TxnLog, write_transactions
from tiercel.storage.log_values import AbortedTransaction, FetchDataInfo, FetchIsolation
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.remote_index_cache import RemoteIndexCache
from tiercel.tiered.remote_log_reader import RemoteLogReader, RemoteStorageFetchInfo
from tiercel.tiered.remote_storage_thread_pool import RemoteStorageThreadPool
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.remote_storage_manager import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
)

__all__ = ["scheduler"]

SIZES = (1, 300, 1500, 1 << 20)


@dataclass
class TieredTxns:
    log: UnifiedLog
    txns: TxnLog
    rsm: LocalTieredStorage
    reader: RemoteLogReader
    segments: list[RemoteLogSegmentMetadata]

    async def remote(self, offset: int, max_bytes: int, committed: bool = True) -> FetchDataInfo:
        isolation = FetchIsolation.TXN_COMMITTED if committed else FetchIsolation.HIGH_WATERMARK
        info = RemoteStorageFetchInfo(
            max_bytes, True, topic_id_partition(self.log), offset, isolation
        )
        return await self.reader.read(info, self.log.leader_epoch_cache, self.log.local_log)


@pytest.fixture
def pool() -> Iterator[RemoteStorageThreadPool]:
    p = RemoteStorageThreadPool("remote-txn-test", threads=2, max_pending_tasks=4)
    yield p
    p.shutdown()


async def tiered_txns(
    tmp_path: Path,
    scheduler: Scheduler,
    pool: RemoteStorageThreadPool,
    up_to: int | None,
    mark_txn_idx_empty: bool = True,
) -> TieredTxns:
    log = open_log(str(tmp_path / "txns-0"), small_config(), scheduler)
    txns = write_transactions(log)
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    rlmm = InMemoryRemoteLogMetadataManager()
    reader = RemoteLogReader(rsm, rlmm, RemoteIndexCache(rsm, str(tmp_path / "cache")), pool)
    segments = await tier_rolled_segments(
        log, rsm, rlmm, up_to=up_to, mark_txn_idx_empty=mark_txn_idx_empty
    )
    return TieredTxns(log, txns, rsm, reader, segments)


@pytest.fixture(params=[True, False], ids=["txn_idx_empty", "before_kip_1058"])
async def tiered(
    tmp_path: Path,
    scheduler: Scheduler,
    pool: RemoteStorageThreadPool,
    request: pytest.FixtureRequest,
) -> AsyncIterator[TieredTxns]:
    t = await tiered_txns(tmp_path, scheduler, pool, None, request.param)
    assert len(t.segments) >= 10
    yield t
    await t.log.close()


def as_set(aborted: Sequence[AbortedTransaction] | None) -> set[AbortedTransaction]:
    assert aborted is not None
    assert len(set(aborted)) == len(aborted)  # listed once each
    return set(aborted)


def local_answers(log: UnifiedLog, last: int) -> dict[tuple[int, int], FetchDataInfo]:
    return {
        (offset, size): log.read(offset, size, FetchIsolation.TXN_COMMITTED, True)
        for offset in range(last + 1)
        for size in SIZES
    }


async def test_every_remote_offset_lists_the_aborted_transactions_a_local_read_lists(
    tiered: TieredTxns,
) -> None:
    last = tiered.segments[-1].end_offset
    local = local_answers(tiered.log, last)
    # Aborts indexed in several segments, some of them for transactions whose records
    # started segments earlier: the search walks on from the segment read.
    with_txnindex = [s for s in tiered.segments if _has_txn_index(tiered.rsm, s)]
    assert 2 <= len(with_txnindex) < len(tiered.segments)
    seen: set[AbortedTransaction] = set()
    for (offset, size), expected in local.items():
        remote = await tiered.remote(offset, size)
        assert remote.records == expected.records, (offset, size)
        assert as_set(remote.aborted_transactions) == as_set(expected.aborted_transactions), (
            offset,
            size,
        )
        seen |= set(remote.aborted_transactions or ())
    producers = {t.producer_id for t in seen}
    assert producers == {100, 102}  # both aborting producers, never the committing one
    # Once local retention removed the tiered segments, the remote answers stay the same.
    drop_local_segments_below(tiered.log, last + 1)
    for offset in range(0, last + 1, 3):
        remote = await tiered.remote(offset, 1500)
        expected = local[(offset, 1500)]
        assert as_set(remote.aborted_transactions) == as_set(expected.aborted_transactions)


async def test_read_uncommitted_remote_reads_list_no_aborted_transactions(
    tiered: TieredTxns,
) -> None:
    remote = await tiered.remote(0, 1 << 20, committed=False)
    assert remote.records
    assert remote.aborted_transactions is None


async def test_an_abort_indexed_only_in_a_local_segment_is_found_there(
    tmp_path: Path, scheduler: Scheduler, pool: RemoteStorageThreadPool
) -> None:
    """Records of a transaction in tiered segments, its ABORT in a segment still local
    only (tiering stops at the last stable offset, not at the marker): the search goes
    on into the local log, as Kafka's collectAbortedTransactionInLocalSegments."""
    probe = await tiered_txns(tmp_path / "probe", scheduler, pool, None)
    # The last abort by producer 102 (open for many rounds): tier only what lies
    # before its marker's segment.
    entry = max(
        (e for s in probe.log.segments for e in s.txn_index.entries if e.producer_id == 102),
        key=lambda e: e.last_offset,
    )
    marker_segment = probe.log.local_log.floor_segment(entry.last_offset)
    assert marker_segment is not None
    cut = marker_segment.base_offset
    assert entry.first_offset < cut  # its records start in an earlier segment
    await probe.log.close()
    t = await tiered_txns(tmp_path / "cut", scheduler, pool, cut)
    try:
        assert t.segments[-1].end_offset == cut - 1
        local = t.log.read(entry.first_offset, 1 << 20, FetchIsolation.TXN_COMMITTED, True)
        expected = as_set(local.aborted_transactions)
        assert AbortedTransaction(102, entry.first_offset) in expected
        drop_local_segments_below(t.log, cut)
        remote = await t.remote(entry.first_offset, 1 << 20)
        assert remote.records
        assert as_set(remote.aborted_transactions) == expected
        without_local = await t.reader.read(
            RemoteStorageFetchInfo(
                1 << 20,
                True,
                topic_id_partition(t.log),
                entry.first_offset,
                FetchIsolation.TXN_COMMITTED,
            ),
            t.log.leader_epoch_cache,
        )
        # Without the local log the search cannot reach the marker's segment.
        assert AbortedTransaction(102, entry.first_offset) not in as_set(
            without_local.aborted_transactions
        )
    finally:
        await t.log.close()


async def test_segments_without_aborts_are_passed_over_unfetched(
    tmp_path: Path, scheduler: Scheduler, pool: RemoteStorageThreadPool
) -> None:
    """With KIP-1058's txnIdxEmpty, the search fetches the indexes of the segment read
    and of the segments holding aborts only: a tier of hundreds of segments without
    transactions costs a read_committed fetch nothing more than a read_uncommitted one.
    Without the flag every later segment's indexes were fetched, each fetch three
    object reads."""
    t = await tiered_txns(tmp_path, scheduler, pool, None)
    try:
        cache = t.reader.index_cache
        remote = await t.remote(0, 300)
        assert remote.records
        fetched = {
            s.remote_log_segment_id.id for s in t.segments if s.remote_log_segment_id.id in cache
        }
        with_aborts = {s.remote_log_segment_id.id for s in t.segments if not s.txn_idx_empty}
        first = t.segments[0].remote_log_segment_id.id
        assert fetched <= with_aborts | {first}
        assert len(t.segments) - len(with_aborts) >= 5  # segments were passed over
    finally:
        await t.log.close()


def _has_txn_index(rsm: LocalTieredStorage, metadata: RemoteLogSegmentMetadata) -> bool:
    try:
        return bool(rsm.fetch_index(metadata, IndexType.TRANSACTION))
    except RemoteResourceNotFoundError:
        return False
