"""ProducerStateManager: Kafka 3.9's acceptance rules for idempotent batches (duplicates,
gaps, epochs, unknown producers, sequence wrap-around), expiration, and the snapshot
bookkeeping behind truncation, the log start offset and stray files."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tiercel.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
)
from tiercel.storage.log_values import AppendBatch
from tiercel.storage.producer_append_info import AppendOrigin
from tiercel.storage.producer_snapshot import encode_snapshot
from tiercel.storage.producer_state import ProducerStateManager
from tiercel.storage.producer_state_entry import BatchMetadata, ProducerStateEntry
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.snapshot_io import ExecutorSnapshotIo
from tiercel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
NOW = 1_800_000_000_000
INT32_MAX = 2**31 - 1
CLIENT = AppendOrigin.CLIENT
REPLICATION = AppendOrigin.REPLICATION


@dataclass
class Partition:
    """A manager plus the offsets a log would assign: appends as UnifiedLog does them."""

    manager: ProducerStateManager
    end: int = 0
    written: list[tuple[int, int, int, int]] = field(default_factory=list)

    def send(
        self,
        producer_id: int,
        epoch: int,
        seq: int,
        count: int = 1,
        origin: AppendOrigin = CLIENT,
        timestamp: int = NOW,
        transactional: bool = False,
    ) -> tuple[int, int]:
        """(first, last) offset of the batch: where it was appended, or where the batch
        it duplicates was."""
        batch = AppendBatch(
            (),
            0,
            self.end,
            self.end + count - 1,
            timestamp,
            0,
            producer_id,
            epoch,
            seq,
            transactional,
        )
        analyzed = self.manager.prepare_append([batch], origin)
        if analyzed.duplicate is not None:
            return analyzed.duplicate.first_offset, analyzed.duplicate.last_offset
        for info in analyzed.updates:
            self.manager.update(info)
        self.written.append((producer_id, epoch, seq, self.end))
        self.end += count
        self.manager.update_map_end_offset(self.end)
        return batch.base_offset, batch.last_offset


def new_partition(
    directory: Path | str = "/nonexistent", expiration_ms: int = 3_600_000
) -> Partition:
    return Partition(ProducerStateManager(TP, str(directory), expiration_ms))


# -- acceptance rules ---------------------------------------------------------------------


def test_an_unknown_producer_is_accepted_at_any_sequence() -> None:
    # KIP-360: no UNKNOWN_PRODUCER_ID from produce; the state starts where the client is.
    p = new_partition()
    assert p.send(7, 0, 500, 3) == (0, 2)
    assert p.send(7, 0, 503) == (3, 3)
    assert p.send(8, 4, INT32_MAX) == (4, 4)
    assert p.manager.last_entry(7).last_seq == 503  # type: ignore[union-attr]


def test_batches_must_follow_the_last_sequence() -> None:
    p = new_partition()
    p.send(7, 0, 0, 5)
    with pytest.raises(OutOfOrderSequenceNumberError, match=r"6 \(incoming seq\. number\), 4 "):
        p.send(7, 0, 6)
    with pytest.raises(OutOfOrderSequenceNumberError):
        p.send(7, 0, 4)  # overlaps the last batch but is not it
    assert p.end == 5
    assert p.send(7, 0, 5, 2) == (5, 6)  # nothing changed: the right one still fits


def test_each_of_the_last_five_batches_is_a_duplicate_with_its_offsets() -> None:
    p = new_partition()
    p.send(9, 0, 0, 2)  # offsets 0-1
    p.send(3, 0, 0)  # another producer in between: offset 2
    originals = [p.send(9, 0, 2 + 2 * i, 2) for i in range(5)]
    end = p.end
    for i, original in enumerate(originals):
        assert p.send(9, 0, 2 + 2 * i, 2) == original
    assert p.end == end, "a retry is never written again"
    # The sixth-newest is no longer cached: it is out of order, not appended.
    with pytest.raises(OutOfOrderSequenceNumberError):
        p.send(9, 0, 0, 2)
    assert p.end == end


def test_a_retry_with_another_sequence_range_is_not_a_duplicate() -> None:
    p = new_partition()
    p.send(1, 0, 0, 4)
    with pytest.raises(OutOfOrderSequenceNumberError):
        p.send(1, 0, 0, 2)  # same first sequence, split differently


def test_a_stale_epoch_is_fenced_even_for_a_retry() -> None:
    p = new_partition()
    p.send(1, 0, 0)
    p.send(1, 1, 0)
    with pytest.raises(InvalidProducerEpochError, match="smaller than the last seen epoch 1"):
        p.send(1, 0, 1)
    with pytest.raises(InvalidProducerEpochError):
        p.send(1, 0, 0)  # the epoch-0 batch, retried
    assert p.end == 2


def test_a_new_epoch_starts_at_sequence_zero() -> None:
    p = new_partition()
    p.send(1, 0, 0, 3)
    with pytest.raises(OutOfOrderSequenceNumberError, match="new epoch"):
        p.send(1, 1, 3)
    assert p.send(1, 1, 0) == (3, 3)
    entry = p.manager.last_entry(1)
    assert entry is not None and entry.producer_epoch == 1
    assert list(entry.batch_metadata) == [BatchMetadata(0, 3, 0, NOW)]


def test_sequences_wrap_at_int32_max() -> None:
    p = new_partition()
    p.send(5, 0, INT32_MAX - 4, 3)  # ..MAX-2
    spanning = p.send(5, 0, INT32_MAX - 1, 4)  # MAX-1, MAX, 0, 1
    assert p.manager.last_entry(5).last_seq == 1  # type: ignore[union-attr]
    assert p.send(5, 0, 2) == (7, 7)
    assert p.send(5, 0, INT32_MAX - 1, 4) == spanning  # a retry across the wrap
    q = new_partition()
    q.send(6, 0, INT32_MAX)
    assert q.send(6, 0, 0) == (1, 1)
    with pytest.raises(OutOfOrderSequenceNumberError):
        q.send(6, 0, 2)


def test_a_plain_batch_inside_an_open_transaction_is_refused() -> None:
    # Transactional batches open a transaction (no coordinator verifies them yet,
    # KIP-890 is the coordinator's part); a non-transactional one from the same
    # producer before its marker is INVALID_TXN_STATE, as Kafka's ProducerAppendInfo.
    p = new_partition()
    assert p.send(1, 0, 0, transactional=True) == (0, 0)
    assert p.manager.first_unstable_offset == 0
    with pytest.raises(InvalidTxnStateError):
        p.send(1, 0, 1)
    assert p.end == 1
    assert p.send(1, 0, 1, origin=REPLICATION) == (1, 1)  # the leader decided


def test_replicated_batches_are_not_checked() -> None:
    p = new_partition()
    p.send(1, 2, 0)
    assert p.send(1, 2, 40, origin=REPLICATION) == (1, 1)  # a gap
    assert p.send(1, 1, 0, origin=REPLICATION) == (2, 2)  # an older epoch: only logged
    assert p.send(1, 1, 0, origin=REPLICATION) == (3, 3)  # no duplicate detection either


def test_a_failed_batch_in_a_multi_batch_append_changes_nothing() -> None:
    p = new_partition()
    p.send(1, 0, 0)
    good = AppendBatch((), 0, 1, 1, NOW, 0, 1, 0, 1)
    gap = AppendBatch((), 0, 2, 2, NOW, 0, 1, 0, 5)
    with pytest.raises(OutOfOrderSequenceNumberError):
        p.manager.prepare_append([good, gap], CLIENT)
    assert p.manager.last_entry(1).last_seq == 0  # type: ignore[union-attr]
    analyzed = p.manager.prepare_append([good, AppendBatch((), 0, 2, 3, NOW, 0, 1, 0, 2)], CLIENT)
    assert analyzed.duplicate is None and len(analyzed.updates) == 1
    p.manager.update(analyzed.updates[0])
    assert p.manager.last_entry(1).last_seq == 3  # type: ignore[union-attr]


def test_batches_without_a_producer_id_are_ignored() -> None:
    p = new_partition()
    assert p.send(-1, -1, -1) == (0, 0)
    assert p.manager.is_empty


# -- expiration ---------------------------------------------------------------------------


def test_producers_expire_after_producer_id_expiration_ms() -> None:
    p = new_partition(expiration_ms=1000)
    p.send(1, 0, 0, timestamp=NOW)
    p.send(2, 0, 0, timestamp=NOW + 500)
    assert p.manager.remove_expired_producers(NOW + 999) == 0
    assert p.manager.remove_expired_producers(NOW + 1000) == 1
    assert set(p.manager.active_producers) == {2}
    # Forgotten: its next batch is accepted at any sequence, as a new producer's.
    assert p.send(1, 0, 77) == (2, 2)


def test_a_producer_in_a_transaction_does_not_expire() -> None:
    p = new_partition(expiration_ms=1000)
    p.manager.producers[4] = ProducerStateEntry(4, 0, 0, NOW, 12)
    assert p.manager.remove_expired_producers(NOW + 10**9) == 0


# -- snapshots and reloads ----------------------------------------------------------------


def test_a_snapshot_is_taken_only_past_the_latest(tmp_path: Path) -> None:
    p = new_partition(tmp_path)
    p.manager.take_snapshot()
    assert p.manager.snapshot_offsets == ()  # nothing past offset 0
    p.send(1, 0, 0, 3)
    p.manager.take_snapshot()
    p.manager.take_snapshot()
    assert p.manager.snapshot_offsets == (3,)
    assert os.listdir(tmp_path) == [f"{3:020d}.snapshot"]


def test_truncate_and_reload_uses_the_latest_snapshot_at_or_below_the_end(tmp_path: Path) -> None:
    p = new_partition(tmp_path)
    p.send(1, 0, 0, 2)
    p.manager.take_snapshot()  # at 2: producer 1 seq 1
    p.send(1, 0, 2, 2)
    p.send(2, 0, 0)
    p.manager.take_snapshot()  # at 5
    p.send(1, 0, 4)
    p.manager.take_snapshot()  # at 6
    p.manager.truncate_and_reload(0, 5, NOW)
    assert p.manager.snapshot_offsets == (2, 5)
    assert sorted(os.listdir(tmp_path)) == [f"{2:020d}.snapshot", f"{5:020d}.snapshot"]
    assert p.manager.map_end_offset == 5
    assert p.manager.last_entry(1).last_seq == 3  # type: ignore[union-attr]
    p.manager.truncate_and_reload(2, 4, NOW)  # snapshots <= log start go too
    assert p.manager.snapshot_offsets == ()
    assert p.manager.map_end_offset == 2 and p.manager.is_empty


def test_a_corrupt_latest_snapshot_falls_back_to_an_older_one(tmp_path: Path) -> None:
    p = new_partition(tmp_path)
    p.send(1, 0, 0)
    p.manager.take_snapshot()
    p.send(1, 0, 1)
    p.manager.take_snapshot()
    (tmp_path / f"{2:020d}.snapshot").write_bytes(b"\x00\x01garbage")
    fresh = ProducerStateManager(TP, str(tmp_path))
    fresh.remove_stray_snapshots([0, 1])
    fresh.truncate_and_reload(0, 2, NOW)
    assert fresh.map_end_offset == 1
    assert fresh.last_entry(1).last_seq == 0  # type: ignore[union-attr]
    assert fresh.snapshot_offsets == (1,)
    assert not (tmp_path / f"{2:020d}.snapshot").exists()


def test_expired_producers_are_not_loaded(tmp_path: Path) -> None:
    p = new_partition(tmp_path, expiration_ms=1000)
    p.send(1, 0, 0, timestamp=NOW)
    p.send(2, 0, 0, timestamp=NOW + 2000)
    p.manager.take_snapshot()
    fresh = ProducerStateManager(TP, str(tmp_path), 1000)
    fresh.remove_stray_snapshots([0])
    fresh.truncate_and_reload(0, 2, NOW + 2500)
    assert set(fresh.active_producers) == {2}


def test_stray_snapshots_go_but_the_clean_shutdown_one_stays(tmp_path: Path) -> None:
    for offset in (5, 10, 17, 30, 40):
        (tmp_path / f"{offset:020d}.snapshot").write_bytes(encode_snapshot([]))
    manager = ProducerStateManager(TP, str(tmp_path))
    manager.remove_stray_snapshots([0, 10, 30])
    assert manager.snapshot_offsets == (10, 30, 40)
    assert sorted(os.listdir(tmp_path)) == [f"{o:020d}.snapshot" for o in (10, 30, 40)]
    # The newest stray below the last segment base is not a shutdown snapshot: it goes.
    manager = ProducerStateManager(TP, str(tmp_path))
    manager.remove_stray_snapshots([0, 10, 50])
    assert manager.snapshot_offsets == (10,)


def test_moving_the_log_start_keeps_producers(tmp_path: Path) -> None:
    p = new_partition(tmp_path)
    p.send(1, 0, 0, 10)
    p.manager.on_log_start_offset_incremented(20)
    assert p.manager.map_end_offset == 20
    # Its batch is below the log start but a retry is still recognised (Kafka >= 2.4).
    assert p.send(1, 0, 0, 10) == (0, 9)


def test_truncate_fully_forgets_everything(tmp_path: Path) -> None:
    p = new_partition(tmp_path)
    p.send(1, 0, 0)
    p.manager.take_snapshot()
    p.manager.truncate_fully_and_start_at(100)
    assert p.manager.is_empty and p.manager.snapshot_offsets == ()
    assert p.manager.map_end_offset == 100 and os.listdir(tmp_path) == []


async def test_executor_io_keeps_the_order_of_writes_and_deletions(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    io = ExecutorSnapshotIo(scheduler, "test")
    p = new_partition(tmp_path)
    p.manager.set_io(io)
    p.send(1, 0, 0)
    p.manager.take_snapshot()
    # Still being written: a reload reads it from memory.
    p.send(1, 0, 1)
    p.manager.truncate_and_reload(0, 1, NOW)
    assert p.manager.last_entry(1).last_seq == 0  # type: ignore[union-attr]
    p.manager.delete_snapshot(1)
    p.end = 1
    p.send(1, 0, 1)
    p.manager.take_snapshot()
    await io.drain()
    await asyncio.sleep(0)
    assert os.listdir(tmp_path) == [f"{2:020d}.snapshot"]


async def test_a_closed_manager_writes_no_more_files(tmp_path: Path, scheduler: Scheduler) -> None:
    io = ExecutorSnapshotIo(scheduler, "test")
    p = new_partition(tmp_path)
    p.manager.set_io(io)
    p.send(1, 0, 0)
    p.manager.take_snapshot()
    p.manager.close()
    await io.drain()
    assert os.listdir(tmp_path) == []


def test_a_snapshot_from_the_remote_tier_becomes_the_state_and_a_file(tmp_path: Path) -> None:
    """A follower restarting at its leader's local start (KIP-405) takes the producer
    snapshot of the remote segment below it: the producers, and this log's snapshot."""
    (tmp_path / "follower").mkdir()
    leader = new_partition()
    leader.send(1, 0, 0, 3)
    leader.send(2, 5, 0)
    data = encode_snapshot(leader.manager.producers.values())
    follower = new_partition(tmp_path / "follower")
    follower.manager.truncate_fully_and_start_at(40)
    follower.manager.load_snapshot(40, data, NOW)
    assert {k: repr(v) for k, v in follower.manager.producers.items()} == {
        k: repr(v) for k, v in leader.manager.producers.items()
    }
    assert follower.manager.snapshot_offsets == (40,)
    assert follower.manager.map_end_offset == 40
    assert os.listdir(tmp_path / "follower") == [f"{40:020d}.snapshot"]
