"""The reader library with isolation level read_committed, over a real UnifiedLog with
committed and aborted transactions tiered into a LocalTieredStorage as the copier does
(``.txnindex`` where a segment indexed an abort, the producer snapshot at each segment's
end): aborted transactions' records are skipped batch by batch using the remote
``.txnindex`` objects, and the read stops at the tier's last stable offset when a
transaction is still open at the end of the last upload."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from support.tiering import open_log, scheduler, small_config
from support.txn_log import tier_with_snapshots, write_transactions
from tiercel.protocol.record_batch import read_header
from tiercel.storage.scheduler import Scheduler
from tiercel.tiered.reader import (
    READ_COMMITTED,
    AbortedTransactions,
    RemoteTierError,
    aborted_transactions,
    plan_topic,
    read_partition,
    tier_last_stable_offset,
)
from tiercel.tiered.rsm.object_layout import object_key
from tiercel.tiered.rsm.remote_storage_manager import IndexType

__all__ = ["scheduler"]

pytestmark = pytest.mark.usefixtures("decoder")


def offsets(batches: list[pa.RecordBatch]) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


async def test_read_committed_skips_exactly_the_aborted_records(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(str(tmp_path / "t-0"), small_config(), scheduler)
    txns = write_transactions(log)
    log.roll()
    store = await tier_with_snapshots(log, tmp_path, scheduler)
    await log.close()
    [plan] = plan_topic(store, "t").partitions
    assert len(plan.ranges) >= 10
    uncommitted = offsets(list(read_partition(store, plan)))
    assert uncommitted == sorted(txns.committed + txns.aborted)
    committed = list(read_partition(store, plan, isolation_level=READ_COMMITTED))
    assert offsets(committed) == txns.committed
    assert len(txns.aborted) > 20 and len(txns.committed) > 100
    # Values name their producer: none of an aborted transaction's remains.
    values = [v for b in committed for v in b.column("value").to_pylist()]
    assert len(values) == len(txns.committed)
    assert tier_last_stable_offset(store, plan) is None  # everything was ended
    # Aborts are indexed in several uploads, not in all of them.
    keys = [object_key(r.segment, IndexType.TRANSACTION.value) for r in plan.ranges]
    indexed = [k for k in keys if os.path.exists(os.path.join(str(tmp_path / "remote"), k))]
    assert 2 <= len(indexed) < len(keys)
    aborted = aborted_transactions(store, plan)
    assert {pid for pid, _, _ in aborted.entries()} == {100, 102}


async def test_an_open_transaction_at_the_tier_end_stops_read_committed_there(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(str(tmp_path / "t-0"), small_config(), scheduler)
    txns = write_transactions(log, rounds=20)
    open_first = log.log_end_offset
    decided = list(txns.committed)
    more = txns
    more.send(log, 103, 2, True)  # still open when the tier ends
    for _ in range(12):
        more.send(log, 7, 2, False)  # plain records after it: several segments
        more.send(log, 101, 1, True)
        more.end(log, 101, commit=True)
    log.roll()
    store = await tier_with_snapshots(log, tmp_path, scheduler)
    await log.close()
    [plan] = plan_topic(store, "t").partitions
    assert plan.ranges[-1].segment.start_offset > open_first  # uploads past the open one
    assert tier_last_stable_offset(store, plan) == open_first
    committed = offsets(list(read_partition(store, plan, isolation_level=READ_COMMITTED)))
    assert committed == decided
    # read_uncommitted still reads everything tiered.
    assert offsets(list(read_partition(store, plan)))[-1] == plan.ranges[-1].last_offset - 1


def test_a_batch_is_dropped_only_inside_its_producer_s_aborted_range() -> None:
    from tiercel.protocol.record_builder import SimpleRecord, build_record_batch

    aborted = AbortedTransactions([(5, 10, 20), (5, 40, 41), (6, 0, 100)])
    assert len(aborted) == 3

    def header(producer_id: int, base: int, transactional: bool = True) -> object:
        batch = build_record_batch(
            [SimpleRecord(b"k", b"v")],
            base_offset=base,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=transactional,
        )
        return read_header(batch)

    drops = aborted.drops
    assert drops(header(5, 10)) and drops(header(5, 20)) and drops(header(5, 41))
    assert not drops(header(5, 9)) and not drops(header(5, 21)) and not drops(header(5, 42))
    assert not drops(header(5, 15, transactional=False))  # an idempotent batch: not in it
    assert not drops(header(7, 15))  # another producer
    assert drops(header(6, 0)) and not drops(header(6, 101))


async def test_a_corrupt_txnindex_object_is_an_error_naming_it(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(str(tmp_path / "t-0"), small_config(), scheduler)
    write_transactions(log, rounds=12)
    log.roll()
    store = await tier_with_snapshots(log, tmp_path, scheduler)
    await log.close()
    [plan] = plan_topic(store, "t").partitions
    keys = [object_key(r.segment, IndexType.TRANSACTION.value) for r in plan.ranges]
    path = next(p for k in keys if os.path.exists(p := os.path.join(str(tmp_path / "remote"), k)))
    with open(path, "ab") as file:
        file.write(b"\x00" * 5)  # a partial entry
    with pytest.raises(RemoteTierError, match=r"\.txnindex"):
        list(read_partition(store, plan, isolation_level=READ_COMMITTED))
