"""The log cleaner removes transaction markers as Kafka's does (LogCleaner's
CleanedTransactionMetadata with the KIP-534 delete horizon): aborted data goes on the
first round, a marker whose transaction has no data left gets a delete horizon, and a
round past it drops the marker; the cleaned transaction indexes and the producer state
rebuilt from the cleaned log stay right."""

from __future__ import annotations

import asyncio
import os
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

import crc32c
import pytest
from log_support import BASE_TS, decode_batch, open_log, partition_dir, small_config

from tiercel.config.log_config import LogConfig
from tiercel.protocol.end_txn_marker import ControlRecordType, EndTransactionMarker
from tiercel.protocol.errors import OutOfOrderSequenceNumberError
from tiercel.protocol.record_batch import (
    DELETE_HORIZON_FLAG_MASK,
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
    read_header,
)
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.records import decode_records, encode_varint, encode_varlong
from tiercel.storage.file_names import producer_snapshot_file
from tiercel.storage.log_cleaner import CleanerConfig, LogCleaner
from tiercel.storage.log_cleaner_manager import LogToClean, cleanable_offsets
from tiercel.storage.log_transactions import end_txn_marker_append_batch
from tiercel.storage.log_validator import validate_records
from tiercel.storage.log_values import FetchIsolation
from tiercel.storage.offset_map import OffsetMap
from tiercel.storage.producer_append_info import AppendOrigin
from tiercel.storage.producer_snapshot import list_snapshot_offsets
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.transaction_index import AbortedTxn
from tiercel.storage.unified_log import UnifiedLog

RETENTION = 60_000
NOW = BASE_TS + 10_000_000
MARKER_TS = BASE_TS + 5  # the markers' timestamp (the coordinator's clock)
Entry = tuple[bytes, bytes | None]


def compacted(**overrides: object) -> LogConfig:
    values: dict[str, object] = {"cleanup_policy": ("compact",), "delete_retention_ms": RETENTION}
    values.update(overrides)
    return small_config(**values)


class Txns:
    """Transactional appends as a producer and its coordinator make them; each
    producer's next sequence is remembered."""

    def __init__(self, log: UnifiedLog) -> None:
        self.log = log
        self.next_seq: dict[int, int] = {}

    def send(self, producer_id: int, entries: Sequence[Entry], epoch: int = 0) -> int:
        """One transactional batch; its first offset."""
        seq = self.next_seq.get(producer_id, 0)
        records = [SimpleRecord(k, v, timestamp=BASE_TS) for k, v in entries]
        data = build_record_batch(
            records,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        info = self.log.append_as_leader(
            validate_records(data, self.log.config, BASE_TS), 0, BASE_TS
        )
        self.next_seq[producer_id] = seq + len(entries)
        return info.first_offset

    def end(self, producer_id: int, control: ControlRecordType, epoch: int = 0) -> int:
        """The COMMIT/ABORT marker, written as WriteTxnMarkers does; its offset."""
        offset = self.log.log_end_offset
        batch = end_txn_marker_append_batch(
            EndTransactionMarker(control, 0),
            producer_id,
            epoch,
            offset,
            0,
            self.log.config,
            MARKER_TS,
        )
        self.log.append([batch], AppendOrigin.COORDINATOR)
        self.log.update_high_watermark(self.log.log_end_offset)
        return offset


def put(log: UnifiedLog, entries: Sequence[Entry]) -> None:
    data = build_record_batch([SimpleRecord(k, v, timestamp=BASE_TS) for k, v in entries])
    log.append_as_leader(validate_records(data, log.config, BASE_TS), 0, BASE_TS)
    log.update_high_watermark(log.log_end_offset)


def headers(log: UnifiedLog) -> list[RecordBatchHeader]:
    return [b.header for s in log.segments for b in s.batches_from(0)]


def batch_at(log: UnifiedLog, offset: int) -> bytes:
    for segment in log.segments:
        for batch in segment.batches_from(0):
            if batch.header.base_offset == offset:
                return segment.read_batch(batch)
    raise AssertionError(f"no batch at {offset}")


def markers(log: UnifiedLog) -> list[int]:
    return [h.base_offset for h in headers(log) if h.is_control]


def index_entries(log: UnifiedLog) -> list[AbortedTxn]:
    return [entry for segment in log.segments for entry in segment.txn_index.entries]


def values(log: UnifiedLog) -> dict[bytes | None, bytes | None]:
    """Key -> value of the data records left, the latest last."""
    found: dict[bytes | None, bytes | None] = {}
    for segment in log.segments:
        for batch in segment.batches_from(0):
            if not batch.header.is_control:
                found.update((r.key, r.value) for r in decode_batch(segment.read_batch(batch)))
    return found


async def clean(cleaner: LogCleaner, log: UnifiedLog, now: int) -> None:
    """One round over the whole cleanable log, as a worker runs it at ``now``."""
    offsets = cleanable_offsets(log, None, now)
    to_clean = LogToClean.of(
        log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset
    )
    assert await cleaner.clean_log(to_clean, OffsetMap(1 << 20), now, threading.Event())


def cleaner_for(scheduler: Scheduler, log: UnifiedLog) -> LogCleaner:
    return LogCleaner(
        CleanerConfig(enable=False),
        [os.path.dirname(log.dir)],
        {log.topic_partition: log},
        scheduler,
    )


def with_delete_horizon(marker: bytes, horizon: int) -> bytes:
    """The one-record control batch ``marker`` as Kafka's MemoryRecordsBuilder writes it
    with a delete horizon: attribute bit 6, baseTimestamp = the horizon, the record's
    timestampDelta taken from it (maxTimestamp and everything else unchanged), the
    length and CRC-32C recomputed. Assembled field by field, apart from the cleaner."""
    header = read_header(marker)
    (record,) = decode_records(marker, 1, RECORD_BATCH_OVERHEAD)
    assert record.key is not None and record.value is not None
    body = (
        b"\x00"
        + encode_varlong(header.base_timestamp + record.timestamp_delta - horizon)
        + encode_varint(0)
        + encode_varint(len(record.key))
        + record.key
        + encode_varint(len(record.value))
        + record.value
        + encode_varint(0)
    )
    records = encode_varint(len(body)) + body
    covered = (
        struct.pack(
            ">hiqqqhii",
            header.attributes | DELETE_HORIZON_FLAG_MASK,
            0,
            horizon,
            header.max_timestamp,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            1,
        )
        + records
    )
    return (
        struct.pack(
            ">qiibI",
            header.base_offset,
            len(covered) + 9,  # + partitionLeaderEpoch, magic, crc
            header.partition_leader_epoch,
            2,
            crc32c.crc32c(covered),
        )
        + covered
    )


@pytest.fixture
def log_dir(tmp_path: Path) -> str:
    return partition_dir(tmp_path)


async def reopen_from_the_log(log: UnifiedLog, scheduler: Scheduler) -> UnifiedLog:
    """Close, remove every producer snapshot and load the directory as after a crash:
    the producer state and the transaction indexes are rebuilt from the cleaned log."""
    await log.close()
    await asyncio.sleep(0)
    await scheduler.drain()
    for offset in list_snapshot_offsets(log.dir):
        os.remove(producer_snapshot_file(log.dir, offset))
    reopened = open_log(log.dir, log.config, scheduler, clean_shutdown=False)
    reopened.update_high_watermark(reopened.log_end_offset)  # as a leader's replicas would
    return reopened


async def test_markers_go_a_round_after_their_delete_horizon(
    log_dir: str, scheduler: Scheduler
) -> None:
    log = open_log(log_dir, compacted(), scheduler)
    txns = Txns(log)
    txns.send(7, [(b"a", b"a1")])
    commit_shadowed = txns.end(7, ControlRecordType.COMMIT)
    aborted_at = txns.send(8, [(b"b", b"aborted"), (b"a", b"aborted")])
    abort = txns.end(8, ControlRecordType.ABORT)
    txns.send(7, [(b"a", b"a2"), (b"c", b"c1")])
    commit_kept_7 = txns.end(7, ControlRecordType.COMMIT)
    txns.send(8, [(b"d", b"d1")])
    commit_kept_8 = txns.end(8, ControlRecordType.COMMIT)
    log.roll()
    put(log, [(b"z", b"active")])  # the active segment is never cleaned
    committed = {b"a": b"a2", b"c": b"c1", b"d": b"d1", b"z": b"active"}
    assert index_entries(log) == [AbortedTxn(8, aborted_at, abort, abort + 1)]
    abort_marker = batch_at(log, abort)
    commit_marker = batch_at(log, commit_shadowed)
    cleaner = cleaner_for(scheduler, log)

    # Round 1: the aborted data and the shadowed committed data go. Both their markers
    # stay as they are, since the round saw their transactions' batches; the ABORT's
    # entry stays in the cleaned transaction index.
    await clean(cleaner, log, NOW)
    assert values(log) == committed
    assert markers(log) == [commit_shadowed, abort, commit_kept_7, commit_kept_8]
    assert batch_at(log, abort) == abort_marker
    assert batch_at(log, commit_shadowed) == commit_marker
    assert index_entries(log) == [AbortedTxn(8, aborted_at, abort, abort + 1)]

    # Round 2: those two transactions have no data left: their markers get the delete
    # horizon, byte for byte as Kafka rebuilds them; the aborted entry is no longer
    # needed. The markers of transactions whose data is there stay as they were.
    await clean(cleaner, log, NOW + 1)
    horizon = NOW + 1 + RETENTION
    assert batch_at(log, commit_shadowed) == with_delete_horizon(commit_marker, horizon)
    assert batch_at(log, abort) == with_delete_horizon(abort_marker, horizon)
    assert not read_header(batch_at(log, commit_kept_7)).has_delete_horizon
    assert index_entries(log) == []
    assert values(log) == committed

    # Before the horizon nothing moves (the horizon is not pushed back); at it, the
    # markers go. Those of the transactions with data left never do.
    await clean(cleaner, log, horizon - 1)
    assert batch_at(log, abort) == with_delete_horizon(abort_marker, horizon)
    await clean(cleaner, log, horizon)
    assert markers(log) == [commit_kept_7, commit_kept_8]
    assert values(log) == committed
    await clean(cleaner, log, horizon + 10 * RETENTION)
    assert markers(log) == [commit_kept_7, commit_kept_8]

    # Both consumers' views are the committed values; nothing is left undecided.
    assert log.last_stable_offset == log.log_end_offset
    info = log.read(0, 1 << 20, FetchIsolation.TXN_COMMITTED, True)
    assert info.aborted_transactions == []

    # Rebuilt from the cleaned log alone, the producer state has both producers'
    # last sequences: the next one is accepted, a gap is refused.
    end_offset = log.log_end_offset
    log = await reopen_from_the_log(log, scheduler)
    assert log.log_end_offset == end_offset
    assert log.last_stable_offset == end_offset
    assert values(log) == committed
    assert index_entries(log) == []
    txns.log = log
    txns.next_seq[7] += 1
    with pytest.raises(OutOfOrderSequenceNumberError):
        txns.send(7, [(b"a", b"gap")])
    txns.next_seq[7] -= 1
    txns.send(7, [(b"a", b"a3")])
    txns.send(8, [(b"e", b"e1")])
    txns.end(7, ControlRecordType.COMMIT)
    txns.end(8, ControlRecordType.ABORT)
    assert log.last_stable_offset == log.log_end_offset
    assert values(log)[b"a"] == b"a3"
    await log.close()
    await cleaner.shutdown()


async def test_a_producers_last_batch_keeps_its_aborted_transactions_marker(
    log_dir: str, scheduler: Scheduler
) -> None:
    # Producer 5's last data batch is aborted data: kept as an empty header for its
    # sequence, it is still a batch of the transaction, so the ABORT marker and its
    # index entry stay (Kafka keeps a marker while any batch of its transaction is).
    log = open_log(log_dir, compacted(), scheduler)
    txns = Txns(log)
    put(log, [(b"a", b"1")])
    aborted_at = txns.send(5, [(b"a", b"aborted")])
    abort = txns.end(5, ControlRecordType.ABORT)
    log.roll()
    put(log, [(b"z", b"active")])
    cleaner = cleaner_for(scheduler, log)
    for now in (NOW, NOW + 1, NOW + 1 + 2 * RETENTION):
        await clean(cleaner, log, now)
        emptied = [h for h in headers(log) if h.base_offset == aborted_at]
        assert [(h.records_count, h.base_sequence) for h in emptied] == [(0, 0)]
        assert markers(log) == [abort]
        assert not read_header(batch_at(log, abort)).has_delete_horizon
        assert index_entries(log) == [AbortedTxn(5, aborted_at, abort, abort + 1)]
        assert values(log) == {b"a": b"1", b"z": b"active"}
    log = await reopen_from_the_log(log, scheduler)
    txns.log = log
    txns.send(5, [(b"a", b"2")])  # sequence 1 follows the emptied batch's 0
    await log.close()
    await cleaner.shutdown()


async def test_a_marker_that_is_its_producers_last_batch_is_emptied_not_dropped(
    log_dir: str, scheduler: Scheduler, tmp_path: Path
) -> None:
    # The coordinator aborted producer 6's transaction with a bumped epoch (as on a
    # transaction timeout): the producer state has the new epoch and no data batch, so
    # the marker carries the epoch that fences the old producer. Past its horizon it is
    # kept as an empty control batch (Kafka's isBatchLastRecordOfProducer, case 3).
    log = open_log(log_dir, compacted(), scheduler)
    txns = Txns(log)
    txns.send(6, [(b"a", b"aborted")])
    abort = txns.end(6, ControlRecordType.ABORT, epoch=1)
    put(log, [(b"b", b"1")])
    log.roll()
    put(log, [(b"z", b"active")])
    entry = log.producer_state.active_producers[6]
    assert (entry.producer_epoch, entry.last_data_offset) == (1, -1)
    cleaner = cleaner_for(scheduler, log)

    await clean(cleaner, log, NOW)  # the aborted data goes, the marker stays
    assert [h.base_offset for h in headers(log)][:2] == [abort, abort + 1]
    await clean(cleaner, log, NOW)  # no data left: the horizon is set
    assert read_header(batch_at(log, abort)).has_delete_horizon
    for now in (NOW + RETENTION, NOW + 3 * RETENTION):
        await clean(cleaner, log, now)
        (emptied,) = [h for h in headers(log) if h.base_offset == abort]
        assert emptied.is_control and emptied.is_transactional
        assert (emptied.records_count, emptied.producer_id, emptied.producer_epoch) == (0, 6, 1)
        assert not emptied.has_delete_horizon
    assert values(log) == {b"b": b"1", b"z": b"active"}

    # A follower fetching the cleaned log takes the emptied marker as it is.
    follower = open_log(partition_dir(tmp_path / "follower"), log.config, scheduler)
    follower.append_as_follower(b"".join(batch_at(log, h.base_offset) for h in headers(log)))
    follower.update_high_watermark(follower.log_end_offset)
    assert headers(follower) == headers(log)
    assert follower.last_stable_offset == follower.log_end_offset == log.log_end_offset
    await follower.close()

    log = await reopen_from_the_log(log, scheduler)
    assert log.last_stable_offset == log.log_end_offset
    txns.log = log
    txns.next_seq[6] = 0
    txns.send(6, [(b"c", b"1")], epoch=2)
    txns.end(6, ControlRecordType.COMMIT, epoch=2)
    assert values(log)[b"c"] == b"1"
    await log.close()
    await cleaner.shutdown()
