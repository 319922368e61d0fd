"""TransactionIndex: Kafka's ``.txnindex`` file of 34-byte AbortedTxn entries, created
only by the first abort, truncated with the log, reset by a recovery, searched by
read_committed fetches; and a broken one makes the loader recover its segment."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from log_support import Producers, end_txn, open_log, partition_dir, small_config

from tiercel.protocol.end_txn_marker import ControlRecordType
from tiercel.storage.abstract_index import CorruptIndexError
from tiercel.storage.file_names import transaction_index_file
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.transaction_index import ABORTED_TXN_SIZE, AbortedTxn, TransactionIndex


def test_entries_are_kafkas_34_bytes_and_the_file_appears_with_the_first(tmp_path: Path) -> None:
    path = str(tmp_path / "00000000000000000100.txnindex")
    index = TransactionIndex(path, 100, file_exists=False)
    assert not os.path.exists(path)
    index.append(AbortedTxn(5, 100, 110, 111))
    index.append(AbortedTxn(6, 105, 120, 105))
    index.flush()
    with open(path, "rb") as f:
        assert f.read() == struct.pack(">hqqqqhqqqq", 0, 5, 100, 110, 111, 0, 6, 105, 120, 105)
    assert ABORTED_TXN_SIZE == 34
    index.close()
    reopened = TransactionIndex(path, 100, file_exists=True)
    assert reopened.entries == [AbortedTxn(5, 100, 110, 111), AbortedTxn(6, 105, 120, 105)]
    reopened.sanity_check()
    with pytest.raises(ValueError):
        reopened.append(AbortedTxn(7, 115, 120, 121))  # markers only move forward


def test_search_stops_at_an_entry_whose_lso_passes_the_range(tmp_path: Path) -> None:
    index = TransactionIndex(str(tmp_path / "x.txnindex"), 0, file_exists=False)
    for entry in (AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 8, 9), AbortedTxn(3, 9, 12, 13)):
        index.append(entry)
    found = index.collect_aborted_txns(4, 9)
    assert found.aborted == [AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 8, 9)]
    assert found.is_complete  # the second entry's LSO (9) reaches the bound
    later = index.collect_aborted_txns(9, 20)
    assert later.aborted == [AbortedTxn(3, 9, 12, 13)] and not later.is_complete


def test_truncation_and_reset(tmp_path: Path) -> None:
    path = str(tmp_path / "x.txnindex")
    index = TransactionIndex(path, 0, file_exists=False)
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 6, 9, 10))
    index.truncate_to(9)
    assert index.entries == [AbortedTxn(1, 0, 5, 6)]
    assert os.path.getsize(path) == ABORTED_TXN_SIZE
    index.reset()
    assert index.entries == [] and os.path.getsize(path) == 0


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">hqqqq", 0, 1, 0, 5, 6)[:-1],  # a torn entry
        struct.pack(">hqqqq", 1, 1, 0, 5, 6),  # an unknown version
        struct.pack(">hqqqq", 0, 1, 0, 5, 6),  # a marker below the segment's base (100)
    ],
)
def test_a_broken_file_fails_the_sanity_check(tmp_path: Path, data: bytes) -> None:
    path = str(tmp_path / "x.txnindex")
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 100, file_exists=True).sanity_check()


async def test_a_torn_index_makes_the_loader_rebuild_it(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    config = small_config(segment_bytes=1 << 20)
    log = open_log(partition_dir(tmp_path), config, scheduler)
    p = Producers()
    p.send(log, 7, 2)
    p.send(log, 8)
    end_txn(log, 7, ControlRecordType.ABORT)
    end_txn(log, 8, ControlRecordType.ABORT)
    entries = list(log.active_segment.txn_index.entries)
    await log.close()
    path = transaction_index_file(log.dir, 0)
    with open(path, "r+b") as f:
        f.truncate(ABORTED_TXN_SIZE + 10)
    reopened = open_log(log.dir, config, scheduler, recovery_point=log.log_end_offset)
    assert (
        reopened.active_segment.txn_index.entries
        == entries
        == [
            AbortedTxn(7, 0, 3, 2),
            AbortedTxn(8, 2, 4, 5),
        ]
    )
    assert os.path.getsize(path) == 2 * ABORTED_TXN_SIZE
    await reopened.close()
