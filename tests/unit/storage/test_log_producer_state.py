"""The UnifiedLog and the idempotent producer: duplicates answered with their first offsets and
never written twice, errors that write nothing, snapshots at rolls and clean shutdown,
retention, truncation, and the state rebuilt after a clean stop or a crash; plus a
hypothesis model of clients that send, retry, skip, fence and restart."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_support import decode_all, open_log, partition_dir, small_config

from tiercel.config.log_config import LogConfig
from tiercel.protocol.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    KafkaError,
    OutOfOrderSequenceNumberError,
)
from tiercel.protocol.record_batch import read_header
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.file_names import producer_snapshot_file
from tiercel.storage.log_validator import assign_offsets, validate_records
from tiercel.storage.log_values import LogAppendInfo
from tiercel.storage.producer_append_info import AppendOrigin
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog

NOW = int(time.time() * 1000)
BIG = small_config(segment_bytes=1 << 20)


def batch(producer_id: int, epoch: int, seq: int, count: int = 1) -> bytes:
    records = [
        SimpleRecord(b"k", b"p%d-e%d-s%d-%d" % (producer_id, epoch, seq, i), timestamp=NOW)
        for i in range(count)
    ]
    return build_record_batch(
        records, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq
    )


def send(log: UnifiedLog, producer_id: int, epoch: int, seq: int, count: int = 1) -> LogAppendInfo:
    validated = validate_records(batch(producer_id, epoch, seq, count), log.config, NOW)
    return log.append_as_leader(validated, 0, NOW)


def offsets(info: LogAppendInfo) -> tuple[int, int]:
    return info.first_offset, info.last_offset


def stored_batches(log: UnifiedLog) -> list[tuple[int, int, int, int]]:
    """(producer id, epoch, base sequence, base offset) of every batch in the log."""
    out = []
    for segment in log.segments:
        for b in segment.batches_from(0):
            h = b.header
            out.append((h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset))
    return out


def snapshot_files(log: UnifiedLog) -> list[int]:
    return sorted(int(n.split(".")[0]) for n in os.listdir(log.dir) if n.endswith(".snapshot"))


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
        recovery_point=log.recovery_point,
        log_start_offset=log.log_start_offset,
        clean_shutdown=clean,
    )


# -- appends --------------------------------------------------------------------------------


async def test_a_duplicate_is_answered_with_its_offsets_and_not_written(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    first = send(log, 1, 0, 0, 3)
    send(log, 2, 0, 0, 2)
    size = log.size
    again = send(log, 1, 0, 0, 3)
    assert offsets(again) == offsets(first) == (0, 2)
    assert again.log_append_time == NOW  # Kafka reports the batch's timestamp
    assert log.log_end_offset == 5 and log.size == size
    assert [b[:3] for b in stored_batches(log)] == [(1, 0, 0), (2, 0, 0)]


async def test_rejected_batches_write_nothing(tmp_path: Path, scheduler: Scheduler) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    send(log, 1, 1, 0, 2)
    with pytest.raises(OutOfOrderSequenceNumberError):
        send(log, 1, 1, 3)
    with pytest.raises(InvalidProducerEpochError):
        send(log, 1, 0, 2)
    assert log.log_end_offset == 2 and len(stored_batches(log)) == 1
    assert offsets(send(log, 1, 1, 2)) == (2, 2)


def test_the_validator_refuses_a_producer_id_without_sequence() -> None:
    data = bytearray(batch(1, 0, 0))
    data[53:57] = (-1).to_bytes(4, "big", signed=True)  # baseSequence
    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")  # a valid CRC again
    assert read_header(bytes(data)).base_sequence == -1
    with pytest.raises(InvalidRecordError, match="Invalid sequence number -1"):
        validate_records(bytes(data), BIG, NOW)


async def test_follower_appends_update_the_state_unchecked(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    validated = validate_records(batch(4, 2, 10, 2), BIG, NOW)
    batches, _, _ = assign_offsets(validated, 0, 0, "CreateTime", NOW)
    log.append(batches)
    entry = log.producer_state.last_entry(4)
    assert entry is not None and (entry.producer_epoch, entry.last_seq) == (2, 11)
    assert log.producer_state.map_end_offset == 2
    assert offsets(send(log, 4, 2, 10, 2)) == (0, 1)  # now a leader sees it as a retry


async def test_a_coordinators_batches_have_their_epoch_checked_not_their_sequence(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    """Kafka's coordinator writes every TxnOffsetCommit with sequence 0 and
    AppendOrigin.COORDINATOR: each is written, none taken for a retry of the last, and a
    fenced epoch is still refused."""
    log = open_log(partition_dir(tmp_path), BIG, scheduler)

    def commit(epoch: int) -> LogAppendInfo:
        validated = validate_records(batch(7, epoch, 0), log.config, NOW)
        return log.append_as_leader(validated, 0, NOW, origin=AppendOrigin.COORDINATOR)

    assert [offsets(commit(3)) for _ in range(3)] == [(0, 0), (1, 1), (2, 2)]
    assert offsets(commit(4)) == (3, 3)
    with pytest.raises(InvalidProducerEpochError):
        commit(3)
    assert [b[1:] for b in stored_batches(log)] == [(3, 0, 0), (3, 0, 1), (3, 0, 2), (4, 0, 3)]
    # A client's identical batch is a retry of the last one: not written again.
    assert offsets(send(log, 7, 4, 0)) == (3, 3) and log.log_end_offset == 4


# -- snapshots, retention, truncation -------------------------------------------------------


async def test_every_roll_snapshots_the_state_at_the_new_base(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), small_config(), scheduler)
    for seq in range(0, 120, 4):
        send(log, 1, 0, seq, 4)
    await settle(scheduler)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    assert snapshot_files(log) == bases[1:]
    assert log.producer_state.snapshot_offsets == tuple(bases[1:])


async def test_retention_deletes_a_segments_snapshot_but_keeps_producers(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), small_config(), scheduler)
    for seq in range(0, 120, 4):
        send(log, 1, 0, seq, 4)
    send(log, 2, 0, 0)
    log.update_high_watermark(log.log_end_offset)
    bases = [s.base_offset for s in log.segments]
    log.maybe_increment_log_start_offset(bases[2])
    assert log.delete_old_segments() == 2
    await settle(scheduler)
    assert snapshot_files(log) == bases[2:]
    assert set(log.producer_state.active_producers) == {1, 2}


async def test_truncation_rebuilds_the_state_below_the_cut(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), small_config(), scheduler)
    for seq in range(0, 40, 4):
        send(log, 1, 0, seq, 4)
    await settle(scheduler)
    log.truncate_to(18)  # inside the batch at 16-19: the log ends at 16
    assert log.log_end_offset == 16
    assert log.producer_state.last_entry(1).last_seq == 15  # type: ignore[union-attr]
    assert max(log.producer_state.snapshot_offsets) <= 16
    assert offsets(send(log, 1, 0, 12, 4)) == (12, 15)  # still a duplicate
    assert offsets(send(log, 1, 0, 16, 4)) == (16, 19)  # written again: it was cut
    await settle(scheduler)
    assert all(o <= 20 for o in snapshot_files(log))


async def test_truncating_everything_forgets_every_producer(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), small_config(), scheduler)
    for seq in range(0, 20, 4):
        send(log, 1, 0, seq, 4)
    log.truncate_fully_and_start_at(50)
    await settle(scheduler)
    assert log.producer_state.is_empty and snapshot_files(log) == []
    assert offsets(send(log, 1, 0, 99)) == (50, 50)


async def test_a_deleted_log_writes_no_snapshot(tmp_path: Path, scheduler: Scheduler) -> None:
    log = open_log(partition_dir(tmp_path), small_config(), scheduler)
    for seq in range(0, 40, 4):
        send(log, 1, 0, seq, 4)
    log.delete()
    await settle(scheduler)
    assert not os.path.exists(log.dir)


# -- restarts -------------------------------------------------------------------------------


async def test_a_clean_restart_loads_the_shutdown_snapshot(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    for seq in range(0, 10, 2):
        send(log, 1, 0, seq, 2)
    send(log, 2, 3, 7)
    log = await reopen(log, scheduler, BIG, clean=True)
    assert snapshot_files(log) == [11]
    assert log.producer_state.map_end_offset == 11
    # As in Kafka, a snapshot holds each producer's last batch only.
    assert offsets(send(log, 1, 0, 8, 2)) == (8, 9)
    assert offsets(send(log, 2, 3, 7)) == (10, 10)
    with pytest.raises(OutOfOrderSequenceNumberError):
        send(log, 1, 0, 6, 2)
    assert offsets(send(log, 1, 0, 10)) == (11, 11)


async def test_after_a_crash_the_last_five_batches_are_still_duplicates(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    first = [offsets(send(log, 1, 0, seq, 2)) for seq in range(0, 16, 2)]
    log = await reopen(log, scheduler, BIG, clean=False)
    end = log.log_end_offset
    for i, seq in enumerate(range(6, 16, 2), start=3):
        assert offsets(send(log, 1, 0, seq, 2)) == first[i]
    assert log.log_end_offset == end
    assert snapshot_files(log) == [end]  # the load ends with a snapshot at the log end


async def test_after_a_crash_retries_across_the_latest_roll_are_still_duplicates(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    first = [offsets(send(log, 1, 0, seq, 2)) for seq in range(0, 6, 2)]
    log.roll()  # a snapshot here keeps only the producer's last batch
    first += [offsets(send(log, 1, 0, seq, 2)) for seq in range(6, 10, 2)]
    await settle(scheduler)
    log = await reopen(log, scheduler, BIG, clean=False)
    end = log.log_end_offset
    # The five in-flight batches straddle the roll: all are still known after the crash.
    for i, seq in enumerate(range(0, 10, 2)):
        assert offsets(send(log, 1, 0, seq, 2)) == first[i]
    assert log.log_end_offset == end


async def test_a_crash_replays_from_the_latest_snapshot(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    config = small_config()
    log = open_log(partition_dir(tmp_path), config, scheduler)
    for seq in range(0, 60, 3):
        send(log, 1, 0, seq, 3)
        send(log, 2, 5, seq // 3)
    await settle(scheduler)
    assert len(log.segments) > 3
    log = await reopen(log, scheduler, config, clean=False)
    assert log.producer_state.last_entry(1).last_seq == 59  # type: ignore[union-attr]
    assert log.producer_state.last_entry(2).last_seq == 19  # type: ignore[union-attr]
    end = log.log_end_offset
    assert offsets(send(log, 2, 5, 19)) == (end - 1, end - 1)
    assert offsets(send(log, 1, 0, 60)) == (end, end)


async def test_a_torn_batch_is_forgotten_and_written_again(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    for seq in range(0, 6, 2):
        send(log, 1, 0, seq, 2)
    await log.flush_epoch_checkpoint()
    active = log.active_segment
    size = active.size
    for segment in log.segments:
        segment.close()
    os.truncate(active.log_path, size - 10)
    await settle(scheduler)
    log = open_log(log.dir, BIG, scheduler, clean_shutdown=False)
    assert log.log_end_offset == 4
    assert offsets(send(log, 1, 0, 4, 2)) == (4, 5)
    assert [b[2] for b in stored_batches(log)] == [0, 2, 4]


async def test_a_corrupt_shutdown_snapshot_is_replaced_by_a_replay(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    config = small_config()
    log = open_log(partition_dir(tmp_path), config, scheduler)
    for seq in range(0, 40, 4):
        send(log, 1, 0, seq, 4)
    end = log.log_end_offset
    await log.close()
    await settle(scheduler)
    with open(producer_snapshot_file(log.dir, end), "r+b") as f:
        f.seek(12)
        f.write(b"\xff")
    log = open_log(log.dir, config, scheduler, recovery_point=end, clean_shutdown=True)
    assert log.producer_state.last_entry(1).last_seq == 39  # type: ignore[union-attr]
    assert offsets(send(log, 1, 0, 36, 4)) == (36, 39)


async def test_a_log_from_before_snapshots_is_not_scanned_after_a_clean_stop(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    config = small_config()
    log = open_log(partition_dir(tmp_path), config, scheduler)
    for seq in range(0, 120, 4):
        send(log, 1, 0, seq, 4)
    await log.close()
    await settle(scheduler)
    for offset in snapshot_files(log):
        os.remove(producer_snapshot_file(log.dir, offset))
    bases = [s.base_offset for s in log.segments]
    log = open_log(log.dir, config, scheduler, recovery_point=120, clean_shutdown=True)
    # Kafka's upgrade path: empty snapshots at the last two segment bases and the end.
    assert snapshot_files(log) == [*bases[-2:], 120]
    assert log.producer_state.is_empty


# -- a model of idempotent clients ------------------------------------------------------------


@dataclass
class Client:
    """One idempotent producer as a client sees it: its epoch, next sequence, and the
    batches the broker acknowledged (with their offsets), newest last."""

    producer_id: int
    epoch: int = 0
    next_seq: int = 0
    acked: list[tuple[int, int, int, tuple[int, int]]] = field(default_factory=list)
    retriable: int = 0  # how many of the newest acked batches the broker must still know


@dataclass
class Model:
    clients: dict[int, Client]
    end: int = 0
    stored: list[tuple[int, int, int, int]] = field(default_factory=list)


START_SEQS = st.sampled_from([0, 7, 2**31 - 5])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 2), st.integers(1, 4)),
        st.tuples(st.just("retry"), st.integers(0, 2), st.integers(0, 4)),
        st.tuples(st.just("retry_old"), st.integers(0, 2), st.integers(5, 9)),
        st.tuples(st.just("gap"), st.integers(0, 2), st.integers(1, 3)),
        st.tuples(st.just("stale"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("bump"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("roll"), st.just(0), st.just(0)),
        st.tuples(st.just("restart"), st.booleans(), st.just(0)),
    ),
    max_size=40,
)


def expect_error(log: UnifiedLog, error: type[KafkaError], *args: int) -> None:
    end = log.log_end_offset
    with pytest.raises(error):
        send(log, *args)
    assert log.log_end_offset == end


async def apply(
    log: UnifiedLog, model: Model, op: tuple[object, ...], scheduler: Scheduler
) -> UnifiedLog:
    kind, a, b = op
    if kind == "roll":
        log.roll()
        return log
    if kind == "restart":
        log = await reopen(log, scheduler, log.config, clean=bool(a))
        for client in model.clients.values():
            client.retriable = min(client.retriable, 1)  # a snapshot keeps the last batch
        return log
    assert isinstance(a, int) and isinstance(b, int)
    client = model.clients[a]
    pid = client.producer_id
    if kind == "send":
        info = send(log, pid, client.epoch, client.next_seq, b)
        assert offsets(info) == (model.end, model.end + b - 1)
        client.acked.append((client.epoch, client.next_seq, b, offsets(info)))
        client.retriable = min(client.retriable + 1, 5)
        model.stored.append((pid, client.epoch, client.next_seq, model.end))
        model.end += b
        client.next_seq = (client.next_seq + b) % 2**31
    elif kind == "retry" and b < client.retriable:
        epoch, seq, count, original = client.acked[-1 - b]
        assert offsets(send(log, pid, epoch, seq, count)) == original
    elif kind == "retry_old" and b < len(client.acked) and client.acked[-1 - b][0] == client.epoch:
        _, seq, count, _ = client.acked[-1 - b]
        expect_error(log, OutOfOrderSequenceNumberError, pid, client.epoch, seq, count)
    elif kind == "gap" and client.acked:
        seq = (client.next_seq + b) % 2**31
        expect_error(log, OutOfOrderSequenceNumberError, pid, client.epoch, seq)
    elif kind == "stale" and client.epoch > 0 and client.acked:
        expect_error(log, InvalidProducerEpochError, pid, client.epoch - 1, client.next_seq)
    elif kind == "bump" and client.acked:
        expect_error(
            log, OutOfOrderSequenceNumberError, pid, client.epoch + 1, client.next_seq or 1
        )
        client.epoch += 1
        client.next_seq = 0
        client.acked.clear()
        client.retriable = 0
    return log


@given(st.tuples(START_SEQS, START_SEQS, START_SEQS), OPS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_idempotent_clients_match_a_model(
    starts: tuple[int, int, int], ops: list[tuple[object, ...]]
) -> None:
    async def scenario(root: str) -> None:
        scheduler = Scheduler(asyncio.get_running_loop(), 2)
        config = small_config()
        log = open_log(partition_dir(root), config, scheduler)
        model = Model({i: Client(100 + i, next_seq=s) for i, s in enumerate(starts)})
        try:
            for op in ops:
                log = await apply(log, model, op, scheduler)
            assert log.log_end_offset == model.end
            assert stored_batches(log) == model.stored  # each batch exactly once
            values = [r.value for r in decode_all(b"".join(_segment_bytes(log)))]
            assert len(values) == len(set(values)) == model.end
            await log.close()
        finally:
            await scheduler.drain()
            scheduler.shutdown()

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(scenario(root))


def _segment_bytes(log: UnifiedLog) -> list[bytes]:
    return [os.pread(s.fd, s.size, 0) for s in log.segments]
