"""Where a replica's `ElectionState` is kept: ``quorum-state`` in the metadata partition
directory (Kafka's ``QuorumStateStore`` and ``FileQuorumStateStore``).

A replica never votes, nor acts on a new epoch, before the state is durable: every write
goes to ``quorum-state.tmp``, is fsynced, renamed over ``quorum-state`` and the directory
fsynced (Kafka's writeElectionStateToFile and Utils.atomicMoveWithFallback), in the
executor, and the caller awaits it.
"""

from __future__ import annotations

import os
from typing import Final, Protocol

from tiercel.server.raft.election_state import ElectionState
from tiercel.storage.checkpoint_file import atomic_write
from tiercel.storage.scheduler import Scheduler

__all__ = ["DEFAULT_FILE_NAME", "FileQuorumStateStore", "QuorumStateStore"]

DEFAULT_FILE_NAME: Final = "quorum-state"


class QuorumStateStore(Protocol):
    async def read_election_state(self) -> ElectionState | None:
        """The persisted state; None if none was ever written."""

    async def write_election_state(self, state: ElectionState, kraft_version: int) -> None:
        """Persist ``state`` in the data_version of ``kraft_version`` (Kafka's
        KRaftVersion.quorumStateVersion: 0 for a static quorum, 1 with KIP-853)."""


class FileQuorumStateStore:
    """Event-loop only; the file I/O runs in the `Scheduler`'s executor."""

    def __init__(self, path: str, scheduler: Scheduler) -> None:
        self.path = path
        self._scheduler = scheduler

    async def read_election_state(self) -> ElectionState | None:
        text = await self._scheduler.run_blocking(_read, self.path)
        if text is None:
            return None
        line = text.split("\n", 1)[0]
        return ElectionState.from_json(line)

    async def write_election_state(self, state: ElectionState, kraft_version: int) -> None:
        data = state.to_json(kraft_version).encode()
        await self._scheduler.run_blocking(atomic_write, self.path, data)

    def __repr__(self) -> str:
        return f"Quorum state filepath: {os.path.abspath(self.path)}"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None
