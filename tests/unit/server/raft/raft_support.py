"""Helpers shared by the Raft unit tests: a settable clock, batch builders, waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.raft.election_state import ElectionState


class MockTime:
    """Kafka's MockTime: milliseconds that move only when told."""

    def __init__(self, now: int = 10_000) -> None:
        self.now = now

    def milliseconds(self) -> int:
        return self.now

    def sleep(self, ms: int) -> None:
        self.now += ms


def batch(base_offset: int, epoch: int, *values: bytes) -> bytes:
    """A data batch as a leader of ``epoch`` writes it at ``base_offset``."""
    return build_record_batch(
        [SimpleRecord(None, v, timestamp=1000 + base_offset) for v in values or (b"v",)],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
    )


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until ``check()`` holds; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


class MockQuorumStateStore:
    """quorum-state in memory; every write is kept, to check what was persisted when."""

    def __init__(self) -> None:
        self.writes: list[ElectionState] = []

    async def read_election_state(self) -> ElectionState | None:
        return self.writes[-1] if self.writes else None

    async def write_election_state(self, state: ElectionState, kraft_version: int) -> None:
        assert kraft_version == 0
        self.writes.append(state)
