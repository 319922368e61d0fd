"""quorum-state: Kafka's JSON, byte for byte, both data versions; atomic durable writes."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tiercel.server.raft.election_state import ElectionState, QuorumStateFormatError
from tiercel.server.raft.quorum_state_store import FileQuorumStateStore
from tiercel.server.raft.replica_key import ReplicaKey
from tiercel.storage.checkpoint_file import kafka_str_to_uuid
from tiercel.storage.scheduler import Scheduler

VOTERS = frozenset({3, 1, 2})


@pytest.fixture
async def scheduler() -> AsyncIterator[Scheduler]:
    s = Scheduler(asyncio.get_running_loop(), 1)
    yield s
    await s.drain()
    s.shutdown()


def test_version_0_is_the_json_kafka_writes_for_a_static_quorum() -> None:
    # The example of Kafka's FileQuorumStateStore javadoc, with the voters it lists.
    state = ElectionState.with_elected_leader(2, 1, None, VOTERS)
    assert state.to_json(0) == (
        '{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )


def test_version_1_carries_the_voted_directory_id() -> None:
    directory = kafka_str_to_uuid("J8aAPcfLQt2bqs1JT_rMgQ")
    state = ElectionState.with_voted_candidate(2, ReplicaKey(1, directory), VOTERS)
    assert state.to_json(1) == (
        '{"leaderId":-1,"leaderEpoch":2,"votedId":1,'
        '"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}'
    )
    no_vote = ElectionState.with_unknown_leader(5, VOTERS).to_json(1)
    assert '"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA"' in no_vote


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize(
    "state",
    [
        ElectionState.with_unknown_leader(0, VOTERS),
        ElectionState.with_voted_candidate(7, ReplicaKey(2), VOTERS),
        ElectionState.with_elected_leader(9, 3, ReplicaKey(3), VOTERS),
    ],
)
def test_round_trip(state: ElectionState, version: int) -> None:
    back = ElectionState.from_json(state.to_json(version))
    assert (back.epoch, back.leader_id, back.voted_key) == (
        state.epoch,
        state.leader_id,
        state.voted_key,
    )
    assert back.voters == (state.voters if version == 0 else frozenset())


def test_a_zero_directory_id_reads_as_none() -> None:
    directory = uuid.uuid4()
    line = ElectionState.with_voted_candidate(1, ReplicaKey(4, directory), VOTERS).to_json(1)
    assert ElectionState.from_json(line).voted_key == ReplicaKey(4, directory)
    zero = line.replace(
        '"votedDirectoryId":"' + line.split('"votedDirectoryId":"')[1].split('"')[0],
        '"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA',
    )
    assert ElectionState.from_json(zero).voted_key == ReplicaKey(4, None)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not JSON"),
        ("[1]", "not an object node"),
        ('{"leaderId":1}', "does not have data_version"),
        ('{"leaderId":1,"leaderEpoch":1,"votedId":-1,"data_version":2}', r"data_version \(2\)"),
        ('{"leaderEpoch":1,"votedId":-1,"data_version":1}', "leaderId"),
        ('{"leaderId":1,"leaderEpoch":1,"votedId":3,"data_version":1}', "votedDirectoryId"),
        (
            '{"leaderId":1,"leaderEpoch":1,"votedId":3,"votedDirectoryId":"x","data_version":1}',
            "Not a base64",
        ),
    ],
)
def test_malformed_files_are_refused(line: str, message: str) -> None:
    with pytest.raises(QuorumStateFormatError, match=message):
        ElectionState.from_json(line)


def test_a_vote_in_the_leaders_epoch_is_kept() -> None:
    state = ElectionState.with_elected_leader(4, 2, ReplicaKey(2), VOTERS)
    assert state.is_voted_candidate(ReplicaKey(2, uuid.uuid4()))
    assert not state.is_voted_candidate(ReplicaKey(1))
    assert state.is_leader(2) and state.has_voted


async def test_store_writes_atomically_and_reads_back(tmp_path: Path, scheduler: Scheduler) -> None:
    path = tmp_path / "quorum-state"
    store = FileQuorumStateStore(str(path), scheduler)
    assert await store.read_election_state() is None
    state = ElectionState.with_voted_candidate(3, ReplicaKey(1), VOTERS)
    await store.write_election_state(state, 0)
    assert path.read_text() == state.to_json(0)  # one line, no newline, as Kafka writes it
    assert not (tmp_path / "quorum-state.tmp").exists()
    read = await store.read_election_state()
    assert read is not None and read.voted_key == ReplicaKey(1) and read.epoch == 3
    newer = ElectionState.with_elected_leader(4, 2, None, VOTERS)
    await store.write_election_state(newer, 0)
    read = await store.read_election_state()
    assert read is not None and (read.epoch, read.leader_id, read.voted_key) == (4, 2, None)
    assert os.listdir(tmp_path) == ["quorum-state"]


async def test_store_reads_a_file_kafka_wrote(tmp_path: Path, scheduler: Scheduler) -> None:
    path = tmp_path / "quorum-state"
    path.write_text(
        '{"clusterId":"","leaderId":-1,"leaderEpoch":12,"votedId":2,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    read = await FileQuorumStateStore(str(path), scheduler).read_election_state()
    assert read == ElectionState(12, None, ReplicaKey(2), frozenset({1, 2, 3}))
