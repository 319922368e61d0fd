"""The partition side of transactions on a real UnifiedLog: transactional batches open a
producer's transaction, COMMIT/ABORT control batches close it, the last stable offset
bounds read_committed reads, aborted transactions land in the segment's ``.txnindex``
(Kafka's 34-byte entries) and come back with read_committed reads; truncation, a clean
restart (producer snapshots keep open transactions) and a crash (the index is rebuilt
from the log) keep all of it."""

from __future__ import annotations

import asyncio
import os
import struct
import time
from pathlib import Path

import pytest
from log_support import Producers, decode_all, end_txn, open_log, partition_dir, small_config

from tiercel.config.log_config import LogConfig
from tiercel.protocol.end_txn_marker import ControlRecordType
from tiercel.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from tiercel.protocol.record_batch import read_header
from tiercel.storage.file_names import producer_snapshot_file, transaction_index_file
from tiercel.storage.log_values import AbortedTransaction, FetchIsolation
from tiercel.storage.producer_snapshot import decode_snapshot
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.transaction_index import AbortedTxn
from tiercel.storage.unified_log import UnifiedLog

NOW = int(time.time() * 1000)
BIG = small_config(segment_bytes=1 << 20)
COMMIT = ControlRecordType.COMMIT
ABORT = ControlRecordType.ABORT


def replicate(log: UnifiedLog) -> None:
    """A single replica: the high watermark follows the log end."""
    log.update_high_watermark(log.log_end_offset)


def data_offsets(data: bytes) -> list[int]:
    """The offsets of the records of the data (not control) batches in ``data``."""
    out, pos = [], 0
    while pos < len(data):
        header = read_header(data, pos)
        if not header.is_control:
            out.extend(r.offset for r in decode_all(data[pos : pos + header.size_in_bytes]))
        pos += header.size_in_bytes
    return out


def next_offset(data: bytes) -> int:
    """One past the last offset of the batches in ``data``."""
    pos = 0
    while pos < len(data):
        header = read_header(data, pos)
        pos += header.size_in_bytes
    return header.next_offset


def committed_read(log: UnifiedLog, offset: int) -> tuple[list[int], list[AbortedTransaction]]:
    info = log.read(offset, 1 << 20, FetchIsolation.TXN_COMMITTED, True)
    offsets = data_offsets(bytes(info.records))
    assert info.aborted_transactions is not None
    return offsets, list(info.aborted_transactions)


def index_entries(log: UnifiedLog) -> list[AbortedTxn]:
    return [entry for segment in log.segments for entry in segment.txn_index.entries]


async def settle(scheduler: Scheduler) -> None:
    await asyncio.sleep(0.01)
    await scheduler.drain()


async def reopen(
    log: UnifiedLog, scheduler: Scheduler, config: LogConfig, clean: bool
) -> UnifiedLog:
    """Stop the log (cleanly, or as a crash would: nothing more is written) and load it."""
    if clean:
        await log.close()
    else:
        await log.flush_epoch_checkpoint()
        for segment in log.segments:
            segment.close()
    await settle(scheduler)
    return open_log(
        log.dir,
        config,
        scheduler,
        recovery_point=log.recovery_point if clean else 0,
        log_start_offset=log.log_start_offset,
        clean_shutdown=clean,
    )


async def test_the_lso_holds_at_an_open_transaction_until_its_marker_is_replicated(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    p = Producers()
    assert p.send(log, 1, 2, transactional=False) == (0, 1)
    assert p.send(log, 7, 2) == (2, 3)
    assert p.send(log, 1, transactional=False) == (4, 4)
    replicate(log)
    assert (log.high_watermark, log.last_stable_offset) == (5, 2)
    # read_committed stops before the open transaction; read_uncommitted does not.
    assert committed_read(log, 0) == ([0, 1], [])
    assert committed_read(log, 2) == ([], [])
    uncommitted = log.read(0, 1 << 20, FetchIsolation.HIGH_WATERMARK, True)
    assert data_offsets(bytes(uncommitted.records)) == [0, 1, 2, 3, 4]
    assert uncommitted.aborted_transactions is None
    assert end_txn(log, 7, COMMIT) == 5
    # Committed, but the marker is not below the high watermark yet.
    assert log.last_stable_offset == 2
    replicate(log)
    assert log.last_stable_offset == log.high_watermark == 6
    assert committed_read(log, 0) == ([0, 1, 2, 3, 4], [])  # the marker holds no record
    assert index_entries(log) == []
    assert not os.path.exists(transaction_index_file(log.dir, 0))  # only aborts make one


async def test_an_abort_is_indexed_with_the_lso_and_listed_for_overlapping_reads(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    p = Producers()
    assert p.send(log, 7, 2) == (0, 1)
    assert p.send(log, 8) == (2, 2)
    assert end_txn(log, 7, ABORT) == 3
    # Producer 8's transaction is still open: the LSO recorded with the abort is 2.
    assert index_entries(log) == [AbortedTxn(7, 0, 3, 2)]
    with open(transaction_index_file(log.dir, 0), "rb") as f:
        assert f.read() == struct.pack(">hqqqq", 0, 7, 0, 3, 2)
    assert end_txn(log, 8, COMMIT) == 4
    assert p.send(log, 9, transactional=False) == (5, 5)
    replicate(log)
    assert log.last_stable_offset == 6
    assert committed_read(log, 0) == ([0, 1, 2, 5], [AbortedTransaction(7, 0)])
    assert committed_read(log, 2) == ([2, 5], [AbortedTransaction(7, 0)])
    assert committed_read(log, 4) == ([5], [])  # the abort ends before offset 4


async def test_marker_epochs_are_checked_and_a_refused_marker_writes_nothing(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    p = Producers()
    p.send(log, 7, epoch=2)
    with pytest.raises(InvalidProducerEpochError):
        end_txn(log, 7, COMMIT, epoch=1)
    assert log.log_end_offset == 1
    end_txn(log, 7, COMMIT, epoch=2, coordinator_epoch=5)
    p.send(log, 7, epoch=2)
    with pytest.raises(TransactionCoordinatorFencedError):
        end_txn(log, 7, ABORT, epoch=2, coordinator_epoch=4)
    assert log.log_end_offset == 3
    entry = log.producer_state.last_entry(7)
    assert entry is not None
    assert (entry.coordinator_epoch, entry.current_txn_first_offset) == (5, 2)
    # A plain write inside the open transaction is refused too.
    with pytest.raises(InvalidTxnStateError):
        p.send(log, 7, epoch=2, transactional=False)
    # A marker for a producer with no open transaction is written and changes no LSO.
    end_txn(log, 7, ABORT, epoch=2, coordinator_epoch=5)
    end_txn(log, 99, COMMIT)
    replicate(log)
    assert log.last_stable_offset == log.log_end_offset == 5
    assert index_entries(log) == [AbortedTxn(7, 2, 3, 4)]


async def test_truncation_removes_index_entries_and_reopens_the_transaction(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    p = Producers()
    p.send(log, 7, 2)
    end_txn(log, 7, ABORT)
    p.send(log, 8, transactional=False)
    assert index_entries(log) == [AbortedTxn(7, 0, 2, 3)]
    assert log.truncate_to(2)
    assert index_entries(log) == []
    assert os.path.getsize(transaction_index_file(log.dir, 0)) == 0
    replicate(log)
    assert (log.high_watermark, log.last_stable_offset) == (2, 0)
    assert log.producer_state.first_unstable_offset == 0


async def test_a_clean_restart_keeps_open_transactions_in_the_snapshot(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    p = Producers()
    p.send(log, 1, transactional=False)
    p.send(log, 7, 3)
    end = log.log_end_offset
    log = await reopen(log, scheduler, BIG, clean=True)
    # Kafka's snapshot entry: current_txn_first_offset is its last int64 field.
    with open(producer_snapshot_file(log.dir, end), "rb") as f:
        data = f.read()
    assert len(data) == 10 + 2 * 46
    assert struct.unpack_from(">q", data, 10 + 46 + 38)[0] == 1  # producer 7, second entry
    assert struct.unpack_from(">q", data, 10 + 38)[0] == -1  # producer 1: none
    assert {e.producer_id: e.current_txn_first_offset for e in decode_snapshot(data)} == {
        1: None,
        7: 1,
    }
    replicate(log)
    assert log.last_stable_offset == 1
    end_txn(log, 7, ABORT)
    replicate(log)
    assert log.last_stable_offset == 5
    assert index_entries(log) == [AbortedTxn(7, 1, 4, 5)]


async def test_a_crash_rebuilds_the_txn_indexes_and_the_lso_from_the_log(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    config = small_config(segment_bytes=400)
    log = open_log(partition_dir(tmp_path), config, scheduler)
    p = Producers()
    for round_ in range(6):
        p.send(log, 7, 2)
        p.send(log, 8)
        end_txn(log, 7, ABORT if round_ % 2 else COMMIT)
        end_txn(log, 8, ABORT if round_ % 3 == 0 else COMMIT)
    p.send(log, 9)  # left open
    open_first = log.log_end_offset - 1
    before = index_entries(log)
    assert len(log.segments) > 2 and len(before) == 5
    assert len({s.base_offset for s in log.segments if s.txn_index.entries}) > 1
    # The crash also loses the index files themselves.
    for segment in log.segments:
        if os.path.exists(segment.txn_index.path):
            os.remove(segment.txn_index.path)
    log = await reopen(log, scheduler, config, clean=False)
    assert index_entries(log) == before
    replicate(log)
    assert log.last_stable_offset == open_first
    # Reading the whole log segment by segment, as a consumer does, lists every abort.
    aborted: set[AbortedTransaction] = set()
    offset = 0
    while offset < log.last_stable_offset:
        info = log.read(offset, 1 << 20, FetchIsolation.TXN_COMMITTED, True)
        aborted.update(info.aborted_transactions or ())
        offset = next_offset(bytes(info.records))
    assert aborted == {AbortedTransaction(e.producer_id, e.first_offset) for e in before}


async def test_a_follower_replays_markers_and_indexes_aborts(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    leader = open_log(partition_dir(tmp_path, "leader"), BIG, scheduler)
    follower = open_log(partition_dir(tmp_path, "follower"), BIG, scheduler)
    p = Producers()
    p.send(leader, 7, 2)
    p.send(leader, 8)
    end_txn(leader, 7, ABORT)
    data = leader.read(0, 1 << 20, FetchIsolation.LOG_END, True).records
    follower.append_as_follower(data)
    assert index_entries(follower) == index_entries(leader) == [AbortedTxn(7, 0, 3, 2)]
    replicate(follower)
    assert follower.last_stable_offset == 2


async def test_a_follower_completes_transactions_in_batch_order(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """One fetch bringing A's data, B's data, B's ABORT, then A's ABORT: the aborts are
    indexed in the order of their markers, B's (ending at 3) before A's (ending at 4),
    as Kafka's UnifiedLog.analyzeAndValidateProducerState completes them batch by batch.
    Completing them producer by producer wrote A's entry first, and the index refused
    B's after the batches were already in the log."""
    leader = open_log(partition_dir(tmp_path, "leader"), BIG, scheduler)
    follower = open_log(partition_dir(tmp_path, "follower"), BIG, scheduler)
    p = Producers()
    p.send(leader, 7)  # A at 0
    p.send(leader, 8, 2)  # B at 1-2
    end_txn(leader, 8, ABORT)  # 3
    end_txn(leader, 7, ABORT)  # 4
    data = leader.read(0, 1 << 20, FetchIsolation.LOG_END, True).records
    follower.append_as_follower(data)
    expected = [AbortedTxn(8, 1, 3, 0), AbortedTxn(7, 0, 4, 5)]
    assert index_entries(follower) == index_entries(leader) == expected
    replicate(follower)
    assert follower.last_stable_offset == follower.log_end_offset == 5
    # read_committed gets every record with both aborts, so the consumer drops them all.
    both = [AbortedTransaction(8, 1), AbortedTransaction(7, 0)]
    assert committed_read(follower, 0) == ([0, 1, 2], both)
    # A restart keeps both aborts.
    follower = await reopen(follower, scheduler, BIG, clean=True)
    replicate(follower)
    assert index_entries(follower) == expected
    assert committed_read(follower, 0) == ([0, 1, 2], both)


async def test_truncation_above_the_hw_keeps_the_lso_where_it_was(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """Kafka's UnifiedLog.truncateTo rebuilds the producer state first, then updates the
    high watermark: the rebuild replays long-finished transactions as completed but not
    yet replicated, and only the HW update lets them go. Updating the HW first left them
    there, so the LSO fell back to a committed transaction's first offset (read_committed
    reads and ListOffsets LATEST answered 0) until the HW next moved."""
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    p = Producers()
    p.send(log, 7, 2)
    end_txn(log, 7, COMMIT)
    p.send(log, 1, transactional=False)
    replicate(log)
    assert log.high_watermark == log.last_stable_offset == 4
    p.send(log, 1, 2, transactional=False)  # 4-5, never replicated
    p.send(log, 1, transactional=False)  # 6
    assert log.truncate_to(6)
    assert (log.log_end_offset, log.high_watermark, log.last_stable_offset) == (6, 4, 4)
    assert committed_read(log, 0) == ([0, 1, 3], [])
    # Truncated below the HW too: the HW follows the log end, and so does the LSO.
    assert log.truncate_to(3)
    assert (log.log_end_offset, log.high_watermark, log.last_stable_offset) == (3, 3, 3)
