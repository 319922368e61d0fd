"""The voter set by offset (Kafka's TreeMapLogHistory, VoterSetHistory, VoterSet's
VotersRecord form and DynamicVoters): values at and before offsets, truncation that
rolls them back, and the static set underneath."""

from __future__ import annotations

import uuid

import pytest

from tiercel.server.raft.control_record import ControlRecord, control_batch
from tiercel.server.raft.dynamic_voters import DynamicVoters
from tiercel.server.raft.endpoints import Endpoints, HostPort
from tiercel.server.raft.log_history import LogHistory, LogHistoryEntry
from tiercel.server.raft.record_serde import IdentitySerde
from tiercel.server.raft.records_iterator import iter_decoded_batches
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.voter_set import (
    LOCAL_KRAFT_VERSIONS,
    SupportedVersionRange,
    VoterNode,
    VoterSet,
)
from tiercel.server.raft.voter_set_history import VoterSetHistory

DIRS = {i: uuid.UUID(int=(1 << 100) + i) for i in range(1, 6)}
STATIC = VoterSet.from_addresses("CONTROLLER", {1: HostPort("h", 1), 2: HostPort("h", 2)})


def voters(*ids: int) -> VoterSet:
    return VoterSet(
        {
            i: VoterNode(
                ReplicaKey(i, DIRS[i]),
                Endpoints.of({"CONTROLLER": HostPort(f"c{i}", 9000 + i)}),
                LOCAL_KRAFT_VERSIONS,
            )
            for i in ids
        }
    )


def test_log_history_values_by_offset() -> None:
    history: LogHistory[str] = LogHistory()
    assert history.last_entry() is None and history.value_at_or_before(5) is None
    history.add_at(-1, "bootstrap")
    history.add_at(10, "ten")
    history.add_at(20, "twenty")
    assert [history.value_at_or_before(o) for o in (-1, 9, 10, 19, 99)] == [
        "bootstrap",
        "bootstrap",
        "ten",
        "ten",
        "twenty",
    ]
    with pytest.raises(ValueError, match="must be greater than the last offset 20"):
        history.add_at(20, "again")
    with pytest.raises(ValueError, match="greater than or equal to -1"):
        LogHistory[str]().add_at(-2, "x")
    # The log truncated at 20: the value written there is gone, the one before holds.
    history.truncate_new_entries(20)
    assert history.last_entry() == LogHistoryEntry(10, "ten")
    history.add_at(15, "fifteen")
    # A snapshot at 12: what was in effect at 12 (ten) stays, older values go.
    history.truncate_old_entries(12)
    assert history.value_at_or_before(12) == "ten" and history.value_at_or_before(-1) is None
    assert history.last_entry() == LogHistoryEntry(15, "fifteen")
    history.clear()
    assert history.last_entry() is None


def test_voter_set_history_rolls_back_to_the_static_voters() -> None:
    history = VoterSetHistory(STATIC)
    assert history.last_value() == STATIC and history.last_entry() is None
    # The bootstrap checkpoint's set is never checked against anything before it.
    history.add_at(-1, voters(1, 2, 3))
    history.add_at(5, voters(1, 2, 3, 4))
    assert history.last_value() == voters(1, 2, 3, 4)
    # Two sets of the log must share a majority: one voter added or removed at a time.
    with pytest.raises(ValueError, match="doesn't have an overlapping majority"):
        history.add_at(9, voters(1, 4, 5))
    history.truncate_new_entries(5)
    assert history.last_value() == voters(1, 2, 3)
    history.truncate_new_entries(-1)
    assert history.last_value() == STATIC


def test_a_voter_set_survives_its_voters_record() -> None:
    record = voters(1, 2, 3).to_voters_record()
    assert [v.voter_directory_id for v in record.voters] == [DIRS[1], DIRS[2], DIRS[3]]
    data = control_batch(7, 2, 1000, [record])
    [batch] = iter_decoded_batches(data, IdentitySerde())
    [decoded] = batch.control_records
    assert isinstance(decoded, ControlRecord)
    assert VoterSet.from_voters_record(decoded.message) == voters(1, 2, 3)
    # A static voter has no directory id: the zero uuid on the wire, none when read.
    assert VoterSet.from_voters_record(STATIC.to_voters_record()) == VoterSet(
        {
            i: VoterNode(ReplicaKey(i), node.listeners, SupportedVersionRange(0, 0))
            for i, node in STATIC.voters.items()
        }
    )


def test_update_voter_replaces_one_voters_endpoints() -> None:
    moved = VoterNode(
        ReplicaKey(2, DIRS[2]),
        Endpoints.of({"CONTROLLER": HostPort("new", 1)}),
        LOCAL_KRAFT_VERSIONS,
    )
    updated = voters(1, 2, 3).update_voter(moved)
    assert updated.listeners(2) == moved.listeners and updated.listeners(1) == voters(1).listeners(
        1
    )
    with pytest.raises(ValueError, match="Update expected"):
        voters(1, 2).update_voter(VoterNode(ReplicaKey(2, DIRS[3]), moved.listeners))


def test_dynamic_voters_become_a_voter_set() -> None:
    text = "1@c1:9001:AAAAAAAAAAAAAAAAAAAAAQ, 2@[::1]:9002:AAAAAAAAAAAAAAAAAAAAAg"
    parsed = DynamicVoters.parse(text)
    assert [str(v) for v in parsed.voters.values()] == [
        "1@c1:9001:AAAAAAAAAAAAAAAAAAAAAQ",
        "2@[::1]:9002:AAAAAAAAAAAAAAAAAAAAAg",
    ]
    voter_set = parsed.to_voter_set("CONTROLLER")
    assert voter_set.voter_keys == [
        ReplicaKey(1, uuid.UUID(int=1)),
        ReplicaKey(2, uuid.UUID(int=2)),
    ]
    assert voter_set.listeners(2) == Endpoints.of({"CONTROLLER": HostPort("::1", 9002)})
