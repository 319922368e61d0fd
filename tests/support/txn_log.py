"""A real UnifiedLog with committed and aborted transactions over many small segments,
for the read_committed tests of the remote tier and the reader library: transactional
batches of several producers interleaved with plain records, ended by COMMIT/ABORT
control batches appended as WriteTxnMarkers appends them, some transactions spanning
several segments (their abort is indexed in a later segment than their records)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path

from support.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from support.tiering import BASE_TS, tier_rolled_segments
from tiercel.protocol.end_txn_marker import ControlRecordType, EndTransactionMarker
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.file_names import producer_snapshot_file
from tiercel.storage.log_transactions import end_txn_marker_append_batch
from tiercel.storage.log_validator import validate_records
from tiercel.storage.producer_append_info import AppendOrigin
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog
from tiercel.tiered.reader import open_object_root
from tiercel.tiered.rsm.local_tiered_storage import LocalTieredStorage
from tiercel.tiered.rsm.object_store import ObjectStore

__all__ = ["TxnLog", "tier_with_snapshots", "write_transactions"]


@dataclass
class TxnLog:
    """What was written: the offsets of records a read_committed reader must see, and
    those of aborted transactions it must not."""

    committed: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)
    _seq: dict[int, int] = field(default_factory=dict)
    _open: dict[int, list[int]] = field(default_factory=dict)

    def send(self, log: UnifiedLog, producer_id: int, count: int, transactional: bool) -> None:
        seq = self._seq.get(producer_id, 0)
        records = [
            SimpleRecord(
                b"k%d" % producer_id,
                b"v%d-%d-" % (producer_id, seq + i) + b"x" * 40,
                timestamp=BASE_TS + seq + i,
            )
            for i in range(count)
        ]
        batch = build_record_batch(
            records,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=seq,
            is_transactional=transactional,
        )
        info = log.append_as_leader(validate_records(batch, log.config, BASE_TS), 0, BASE_TS)
        self._seq[producer_id] = seq + count
        offsets = list(range(info.first_offset, info.last_offset + 1))
        if transactional:
            self._open.setdefault(producer_id, []).extend(offsets)
        else:
            self.committed.extend(offsets)

    def end(self, log: UnifiedLog, producer_id: int, commit: bool) -> None:
        control = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        batch = end_txn_marker_append_batch(
            EndTransactionMarker(control, 0), producer_id, 0, log.log_end_offset, 0, log.config, 0
        )
        log.append([batch], AppendOrigin.COORDINATOR)
        offsets = self._open.pop(producer_id)
        (self.committed if commit else self.aborted).extend(offsets)


def write_transactions(log: UnifiedLog, rounds: int = 40) -> TxnLog:
    """Three transactional producers (100, 101, 102) and a plain one (7) interleaved;
    producer 100 aborts every other transaction, 101 commits, 102 keeps each open for
    many rounds and aborts it. Every transaction is ended and the high watermark is at
    the log end, so the last stable offset is too."""
    txns = TxnLog()
    for i in range(rounds):
        txns.send(log, 100, 1 + i % 3, True)
        txns.send(log, 101, 2, True)
        txns.send(log, 102, 1, True)
        if i % 4 == 3:
            txns.send(log, 7, 2, False)
        if i % 2 == 1:
            txns.end(log, 100, commit=i % 4 == 1)
        if i % 3 == 2:
            txns.end(log, 101, commit=True)
        if i % 11 == 10:
            txns.end(log, 102, commit=False)
    for producer_id in sorted(txns._open):
        txns.end(log, producer_id, commit=producer_id == 101)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset
    txns.committed.sort()
    txns.aborted.sort()
    return txns


async def tier_with_snapshots(log: UnifiedLog, tmp_path: Path, scheduler: Scheduler) -> ObjectStore:
    """Tier every rolled segment with the producer snapshot the log took at its end."""
    await asyncio.sleep(0.01)
    await scheduler.drain()
    snapshots = {}
    for segment in log.segments[1:]:
        path = producer_snapshot_file(log.dir, segment.base_offset)
        if os.path.exists(path):
            with open(path, "rb") as file:
                snapshots[segment.base_offset] = file.read()
    assert len(snapshots) >= len(log.segments) - 2
    rsm = LocalTieredStorage(str(tmp_path / "remote"))
    await tier_rolled_segments(log, rsm, InMemoryRemoteLogMetadataManager(), snapshots)
    return open_object_root(f"file://{rsm.root}")
