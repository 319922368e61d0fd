"""The small values of the Raft package: ordering of log ends, replica keys, endpoints,
the static voter set, timers and the quorum settings."""

from __future__ import annotations

import uuid

import pytest

from tiercel.server.raft.endpoints import Endpoints, HostPort, Node
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.quorum_config import QuorumConfig
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.server.raft.timer import Timer
from tiercel.server.raft.voter_set import VoterSet


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000

    def milliseconds(self) -> int:
        return self.now


def test_log_ends_compare_by_epoch_before_offset() -> None:
    # Raft's "at least as up to date": a later epoch wins whatever the offsets.
    assert OffsetAndEpoch(5, 3) > OffsetAndEpoch(100, 2)
    assert OffsetAndEpoch(10, 2) > OffsetAndEpoch(9, 2)
    assert OffsetAndEpoch(10, 2) >= OffsetAndEpoch(10, 2)
    assert max([OffsetAndEpoch(50, 1), OffsetAndEpoch(3, 4), OffsetAndEpoch(7, 4)]) == (
        OffsetAndEpoch(7, 4)
    )


def test_replica_keys_without_a_directory_match_any_directory() -> None:
    directory = uuid.uuid4()
    assert ReplicaKey(1).matches(ReplicaKey(1, directory))
    assert not ReplicaKey(1, directory).matches(ReplicaKey(1, uuid.uuid4()))
    assert ReplicaKey(1, directory).matches(ReplicaKey(1, directory))
    assert not ReplicaKey(1).matches(ReplicaKey(2))
    assert ReplicaKey.of(3, uuid.UUID(int=0)) == ReplicaKey(3)


def test_endpoints_on_the_wire() -> None:
    endpoints = Endpoints.of({"CONTROLLER": HostPort("h1", 9093), "ALT": HostPort("h2", 9094)})
    assert endpoints.address("CONTROLLER") == HostPort("h1", 9093)
    assert endpoints.address("PLAINTEXT") is None
    assert endpoints.to_leader_endpoints() == [
        {"name": "ALT", "host": "h2", "port": 9094},
        {"name": "CONTROLLER", "host": "h1", "port": 9093},
    ]
    assert endpoints.to_node_endpoints(7, "CONTROLLER") == [
        {"node_id": 7, "host": "h1", "port": 9093}
    ]
    assert endpoints.to_node_endpoints(-1, "CONTROLLER") == []
    assert Endpoints().is_empty and len(endpoints) == 2


def test_static_voter_set() -> None:
    voters = VoterSet.from_addresses(
        "CONTROLLER", {2: HostPort("b", 2), 1: HostPort("a", 1), 3: HostPort("c", 3)}
    )
    assert voters.voter_ids == {1, 2, 3}
    assert voters.is_voter(ReplicaKey(2, uuid.uuid4()))
    assert not voters.is_voter(ReplicaKey(4))
    assert voters.voter_node(3, "CONTROLLER") == Node(3, "c", 3)
    assert voters.voter_node(3, "OTHER") is None
    assert [n.id for n in voters.voter_nodes({3, 1}, "CONTROLLER")] == [1, 3]
    assert not voters.is_only_voter(ReplicaKey(1))
    single = VoterSet.from_addresses("CONTROLLER", {1: HostPort("a", 1)})
    assert single.is_only_voter(ReplicaKey(1))


def test_timer() -> None:
    time = FakeTime()
    timer = Timer(time, 100)
    assert not timer.is_expired and timer.remaining_ms == 100
    time.now += 60
    timer.update()
    assert timer.remaining_ms == 40
    timer.update(time.now - 50)  # never backwards
    assert timer.remaining_ms == 40
    time.now += 40
    timer.update()
    assert timer.is_expired and timer.remaining_ms == 0
    timer.reset(10)
    assert timer.remaining_ms == 10


def test_quorum_config_needs_voters_or_bootstrap_servers() -> None:
    with pytest.raises(ValueError, match="Missing kraft bootstrap servers"):
        QuorumConfig()
    assert QuorumConfig(bootstrap_servers=[HostPort("a", 1)]).fetch_timeout_ms == 2000
    config = QuorumConfig({1: HostPort("a", 1)})
    assert (config.election_timeout_ms, config.election_backoff_max_ms) == (1000, 1000)
    with pytest.raises(ValueError, match=r"controller\.quorum\.fetch\.timeout\.ms"):
        QuorumConfig({1: HostPort("a", 1)}, fetch_timeout_ms=-1)
