"""One committed batch as the Raft client hands it to listeners (Kafka's ``Batch``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from tiercel.server.raft.control_record import ControlRecord

__all__ = ["Batch"]

T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True, slots=True)
class Batch(Generic[T_co]):
    """A data batch has ``records`` and no ``control_records``; a control batch (leader
    change, snapshot header or footer) the reverse.

    Invariants: ``base_offset <= last_offset``; ``epoch`` is the leader epoch that
    appended it; ``append_timestamp`` its max timestamp. A value; safe anywhere."""

    base_offset: int
    epoch: int
    append_timestamp: int
    size_in_bytes: int
    last_offset: int
    records: Sequence[T_co] = ()
    control_records: Sequence[ControlRecord] = ()

    def __iter__(self) -> Iterator[T_co]:
        return iter(self.records)
