"""One leader epoch and the first offset written in it (Kafka's `EpochEntry`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EpochEntry"]


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """A leader epoch and the offset of the first record the leader of that epoch wrote.

    Invariants: a plain value; `LeaderEpochFileCache` keeps its entries strictly increasing in
    both fields and rejects negative ones. Thread/loop contract: a value, safe anywhere.
    """

    epoch: int
    start_offset: int
