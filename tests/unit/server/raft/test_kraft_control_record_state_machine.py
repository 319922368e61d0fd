"""KRaftControlRecordStateMachine over an in-memory log (Kafka's
KRaftControlRecordStateMachineTest): the voters and kraft.version of the bootstrap
snapshot, of VotersRecords in the log by offset, rolled back by truncation and reloaded
from a newer snapshot; and what the leader and the snapshot writer add for them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mock_raft_log import MockLog, MockRawSnapshotReader, MockRawSnapshotWriter
from raft_support import MockTime, batch
from test_voter_set_history import STATIC, voters

from tiercel.server.raft.batch_accumulator import BatchAccumulator
from tiercel.server.raft.control_record import (
    ControlRecordType,
    control_batch,
    kraft_version_record,
    snapshot_footer_record,
    snapshot_header_record,
)
from tiercel.server.raft.endpoints import Endpoints, HostPort
from tiercel.server.raft.kraft_control_record_state_machine import (
    KRaftControlRecordStateMachine,
)
from tiercel.server.raft.leader_state import LeaderState
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.records_iterator import iter_decoded_batches
from tiercel.server.raft.records_snapshot import RecordsSnapshotWriter
from tiercel.server.raft.snapshots import BOOTSTRAP_SNAPSHOT_ID
from tiercel.server.raft.voter_set import VoterSet


def snapshot(snapshot_id: OffsetAndEpoch, voter_set: VoterSet, kraft_version: int = 1) -> bytes:
    """A snapshot as the format command (0-0) or a Raft client writes one: header batch
    with the KRaft records, then the footer."""
    header = [snapshot_header_record(0), kraft_version_record(kraft_version)]
    header.append(voter_set.to_voters_record())
    epoch = snapshot_id.epoch
    return control_batch(0, epoch, 0, header) + control_batch(
        3, epoch, 0, [snapshot_footer_record()]
    )


def bootstrapped(voter_set: VoterSet) -> MockLog:
    log = MockLog()
    data = snapshot(BOOTSTRAP_SNAPSHOT_ID, voter_set)
    log.snapshots[BOOTSTRAP_SNAPSHOT_ID] = MockRawSnapshotReader(BOOTSTRAP_SNAPSHOT_ID, data)
    return log


def voters_batch(base_offset: int, epoch: int, voter_set: VoterSet) -> bytes:
    return control_batch(base_offset, epoch, 0, [voter_set.to_voters_record()])


def test_the_static_voters_without_a_snapshot_or_record() -> None:
    log = MockLog()
    log.append_as_leader(batch(0, 1, b"a", b"b"), 1)
    machine = KRaftControlRecordStateMachine(STATIC, log)
    machine.update_state()
    assert machine.last_voter_set() == STATIC and machine.last_voter_set_entry() is None
    assert machine.last_kraft_version() == 0 and machine.kraft_version_at_offset(1) == 0
    assert machine.voter_set_at_offset(1) is None


def test_the_voters_of_the_bootstrap_snapshot_then_of_the_log() -> None:
    log = bootstrapped(voters(1, 2, 3))
    machine = KRaftControlRecordStateMachine(VoterSet({}), log)
    machine.update_state()
    entry = machine.last_voter_set_entry()
    assert entry is not None and (entry.offset, entry.value) == (-1, voters(1, 2, 3))
    assert machine.last_kraft_version() == 1
    # Data batches are passed over; a VotersRecord counts from its offset, uncommitted.
    log.append_as_leader(batch(0, 1, b"a", b"b"), 1)
    log.append_as_leader(voters_batch(2, 1, voters(1, 2, 3, 4)), 1)
    log.append_as_leader(batch(3, 1, b"c"), 1)
    machine.update_state()
    assert log.high_watermark.message_offset == 0
    assert machine.last_voter_set() == voters(1, 2, 3, 4)
    assert machine.voter_set_at_offset(1) == voters(1, 2, 3)
    assert machine.voter_set_at_offset(3) == voters(1, 2, 3, 4)
    assert machine.kraft_version_at_offset(3) == 1
    with pytest.raises(ValueError, match="largest known offset \\(3\\)"):
        machine.voter_set_at_offset(4)


def test_truncation_rolls_the_voters_back() -> None:
    log = bootstrapped(voters(1, 2, 3))
    machine = KRaftControlRecordStateMachine(VoterSet({}), log)
    log.append_as_leader(batch(0, 1, b"a"), 1)
    log.append_as_leader(voters_batch(1, 1, voters(1, 2, 3, 4)), 1)
    machine.update_state()
    assert machine.last_voter_set() == voters(1, 2, 3, 4)
    # A new leader's log diverged at offset 1: the follower truncates there, and the
    # voter set of the dropped record no longer counts.
    log.truncate_to(1)
    machine.truncate_new_entries(1)
    assert machine.last_voter_set() == voters(1, 2, 3)
    # What the new leader wrote at the same offsets is read in their place.
    log.append_as_follower(voters_batch(1, 2, voters(1, 2)))
    machine.update_state()
    assert machine.last_voter_set() == voters(1, 2)
    entry = machine.last_voter_set_entry()
    assert entry is not None and entry.offset == 1


def test_a_snapshot_past_the_log_replaces_what_was_read() -> None:
    log = bootstrapped(voters(1, 2, 3))
    machine = KRaftControlRecordStateMachine(VoterSet({}), log)
    machine.update_state()
    # A follower downloads the leader's snapshot at 10 and empties its log there.
    snapshot_id = OffsetAndEpoch(10, 2)
    data = snapshot(snapshot_id, voters(2, 3, 4))
    log.snapshots[snapshot_id] = MockRawSnapshotReader(snapshot_id, data)
    assert log.truncate_to_latest_snapshot()
    machine.update_state()
    entry = machine.last_voter_set_entry()
    assert entry is not None and (entry.offset, entry.value) == (9, voters(2, 3, 4))
    assert machine.voter_set_at_offset(9) == voters(2, 3, 4)
    log.append_as_follower(voters_batch(10, 2, voters(2, 3)))
    machine.update_state()
    assert machine.voter_set_at_offset(10) == voters(2, 3)


def new_leader(voter_set: VoterSet, listeners: Endpoints) -> LeaderState[bytes]:
    time = MockTime()
    accumulator = BatchAccumulator(4, 7, 25, 1 << 20, 10, time, IdentitySerde())
    key = voter_set.voters[1].voter_key
    return LeaderState(time, key, 4, 7, voter_set, {1, 2}, accumulator, listeners, 2000)


def start_of_epoch_types(
    state: LeaderState[bytes], kraft_version: int, offset: int | None
) -> list[tuple[ControlRecordType, Any]]:
    state.append_start_of_epoch_control_records(0, kraft_version, offset)
    [completed] = state.accumulator.drain()
    [decoded] = iter_decoded_batches(completed.data, IdentitySerde())
    return [(r.type, r.message) for r in decoded.control_records]


def test_a_leader_writes_the_bootstrap_voters_into_the_log() -> None:
    # Voters of the bootstrap snapshot (offset -1): written at the epoch's start, with
    # kraft.version, so every replica has them in the replicated log (Kafka's
    # LeaderState.appendStartOfEpochControlRecords).
    local = voters(1).listeners(1)
    records = start_of_epoch_types(new_leader(voters(1, 2, 3), local), 1, -1)
    assert [t for t, _ in records] == [
        ControlRecordType.LEADER_CHANGE,
        ControlRecordType.KRAFT_VERSION,
        ControlRecordType.KRAFT_VOTERS,
    ]
    assert int(records[1][1].k_raft_version) == 1
    assert VoterSet.from_voters_record(records[2][1]) == voters(1, 2, 3)
    # Voters already in the log, and this leader's endpoints unchanged: nothing more.
    records = start_of_epoch_types(new_leader(voters(1, 2, 3), local), 1, 5)
    assert [t for t, _ in records] == [ControlRecordType.LEADER_CHANGE]
    # Its endpoints moved since: the set is written again with the new ones.
    moved = Endpoints.of({"CONTROLLER": HostPort("elsewhere", 1)})
    records = start_of_epoch_types(new_leader(voters(1, 2, 3), moved), 1, 5)
    assert VoterSet.from_voters_record(records[2][1]).listeners(1) == moved
    # kraft.version 0 (static voters) writes none.
    records = start_of_epoch_types(new_leader(voters(1, 2, 3), local), 0, None)
    assert [t for t, _ in records] == [ControlRecordType.LEADER_CHANGE]
    with pytest.raises(RuntimeError, match="there is no voter set in the log"):
        new_leader(voters(1, 2), local).append_start_of_epoch_control_records(0, 1, None)


def test_a_snapshot_carries_the_voters_of_its_offset() -> None:
    frozen: dict[OffsetAndEpoch, bytes] = {}
    raw = MockRawSnapshotWriter(OffsetAndEpoch(20, 3), lambda i, d: frozen.__setitem__(i, d))
    writer = RecordsSnapshotWriter(raw, 0, 1 << 20, MockTime(), IdentitySerde(), 1, voters(1, 2, 3))
    writer.append([b"r"])
    asyncio.run(writer.freeze())
    log = MockLog()
    snapshot_id = OffsetAndEpoch(20, 3)
    log.snapshots[snapshot_id] = MockRawSnapshotReader(snapshot_id, frozen[snapshot_id])
    assert log.truncate_to_latest_snapshot()
    machine = KRaftControlRecordStateMachine(VoterSet({}), log)
    machine.update_state()
    assert machine.voter_set_at_offset(19) == voters(1, 2, 3)
    assert machine.kraft_version_at_offset(19) == 1
