"""Transaction verification on a real UnifiedLog (KIP-890 part 1): with verification on,
a transactional batch that would open its producer's transaction is written only with
the guard of a verification started on this log; the producer's later batches need
none; a marker (or the transaction's first write) spends the guard, so an append whose
verification raced with a marker fails, as does one presenting an older verification's
guard (ABA); while a verification waits, a higher sequence than the lowest waiting is
out of order; replicas and markers are never checked; verification off checks nothing;
unused verifications expire with producer.id.expiration.ms."""

from __future__ import annotations

from pathlib import Path

import pytest
from log_support import NOW, end_txn, open_log, partition_dir, small_config

from tiercel.protocol.end_txn_marker import ControlRecordType
from tiercel.protocol.errors import InvalidTxnStateError, OutOfOrderSequenceNumberError
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.storage.log_validator import validate_records
from tiercel.storage.log_values import LogAppendInfo
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.unified_log import UnifiedLog
from tiercel.storage.verification_guard import SENTINEL, VerificationGuard

BIG = small_config(segment_bytes=1 << 20)
PID = 7


def txn_batch(seq: int, epoch: int = 0, count: int = 1, transactional: bool = True) -> bytes:
    records = [SimpleRecord(b"k", b"v%d" % (seq + i), timestamp=NOW) for i in range(count)]
    return build_record_batch(
        records,
        producer_id=PID,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )


def append(log: UnifiedLog, data: bytes, guard: VerificationGuard = SENTINEL) -> LogAppendInfo:
    return log.append_as_leader(validate_records(data, log.config, NOW), 0, NOW, guard)


def verifying_log(tmp_path: Path, scheduler: Scheduler, enabled: bool = True) -> UnifiedLog:
    log = open_log(partition_dir(tmp_path), BIG, scheduler)
    log.producer_state.transaction_verification_enabled = enabled
    return log


async def test_a_first_transactional_write_needs_the_guard_of_its_verification(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = verifying_log(tmp_path, scheduler)
    with pytest.raises(InvalidTxnStateError, match="not part of an ongoing transaction"):
        append(log, txn_batch(0))
    assert log.log_end_offset == 0
    assert log.producer_state.ongoing_txns == {}
    guard = log.maybe_start_transaction_verification(PID, 0, 0)
    assert guard is not SENTINEL
    # A second start before the append shares the verification under way.
    assert log.maybe_start_transaction_verification(PID, 0, 0) is guard
    with pytest.raises(InvalidTxnStateError):
        append(log, txn_batch(0), VerificationGuard())  # some other verification's guard
    assert append(log, txn_batch(0), guard).first_offset == 0
    # The transaction is open: no verification, later writes need no guard.
    assert log.producer_state.verification_state_entry(PID) is None
    assert log.maybe_start_transaction_verification(PID, 1, 0) is SENTINEL
    assert append(log, txn_batch(1, count=2)).first_offset == 1
    # A non-transactional write of another producer is never checked.
    plain = build_record_batch(
        [SimpleRecord(b"k", b"p", timestamp=NOW)], producer_id=9, producer_epoch=0, base_sequence=0
    )
    assert append(log, plain).first_offset == 3


async def test_a_marker_between_verification_and_append_voids_the_guard(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = verifying_log(tmp_path, scheduler)
    guard = log.maybe_start_transaction_verification(PID, 0, 0)
    # The coordinator confirmed, then aborted the transaction before the write landed.
    end_txn(log, PID, ControlRecordType.ABORT)
    with pytest.raises(InvalidTxnStateError):
        append(log, txn_batch(0), guard)
    # A retry starts over: a new verification with a new guard (ABA: the old one is dead).
    fresh = log.maybe_start_transaction_verification(PID, 0, 0)
    assert fresh is not guard
    with pytest.raises(InvalidTxnStateError):
        append(log, txn_batch(0), guard)
    assert append(log, txn_batch(0), fresh).first_offset == 1
    assert log.producer_state.first_unstable_offset == 1


async def test_after_a_commit_the_next_transaction_is_verified_again(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = verifying_log(tmp_path, scheduler)
    append(log, txn_batch(0), log.maybe_start_transaction_verification(PID, 0, 0))
    end_txn(log, PID, ControlRecordType.COMMIT)
    with pytest.raises(InvalidTxnStateError):
        append(log, txn_batch(1))  # a late write of the committed transaction
    assert log.log_end_offset == 2
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2  # nothing hangs
    assert append(log, txn_batch(1), log.maybe_start_transaction_verification(PID, 1, 0))


async def test_a_higher_sequence_waits_for_the_lowest_one_being_verified(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = verifying_log(tmp_path, scheduler)
    low = log.maybe_start_transaction_verification(PID, 0, 0)
    high = log.maybe_start_transaction_verification(PID, 5, 0)
    assert high is low
    with pytest.raises(OutOfOrderSequenceNumberError, match="earliest seen sequence"):
        append(log, txn_batch(5), high)
    # A bumped epoch restarts the sequences: its lower bar replaces the old epoch's.
    log.maybe_start_transaction_verification(PID, 0, 1)
    entry = log.producer_state.verification_state_entry(PID)
    assert entry is not None
    assert (entry.epoch, entry.lowest_sequence) == (1, 0)
    assert append(log, txn_batch(0, epoch=1), low).first_offset == 0


async def test_replicas_and_markers_are_not_checked_and_verification_off_checks_nothing(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    leader = verifying_log(tmp_path / "a", scheduler)
    # A follower replays what its leader decided (AppendOrigin.REPLICATION).
    follower = verifying_log(tmp_path / "b", scheduler)
    append(leader, txn_batch(0), leader.maybe_start_transaction_verification(PID, 0, 0))
    end_txn(leader, PID, ControlRecordType.COMMIT)
    follower.append_as_follower((Path(leader.dir) / "00000000000000000000.log").read_bytes())
    assert follower.log_end_offset == 2
    # A marker for a producer with nothing open is written (an empty transaction).
    assert end_txn(leader, 99, ControlRecordType.ABORT) == 2
    off = verifying_log(tmp_path / "c", scheduler, enabled=False)
    assert append(off, txn_batch(0)).first_offset == 0
    assert off.producer_state.first_unstable_offset == 0


async def test_unused_verifications_expire_with_the_producers(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    log = verifying_log(tmp_path, scheduler)
    state = log.producer_state
    guard = log.maybe_start_transaction_verification(PID, 0, 0)
    entry = state.verification_state_entry(PID)
    assert entry is not None
    state.remove_expired_producers(entry.timestamp + state.producer_id_expiration_ms - 1)
    assert state.verification_guard(PID) is guard
    state.remove_expired_producers(entry.timestamp + state.producer_id_expiration_ms)
    assert state.verification_guard(PID) is SENTINEL
    with pytest.raises(InvalidTxnStateError):
        append(log, txn_batch(0), guard)
