"""An offset and the epoch of the record before it (Kafka's ``OffsetAndEpoch`` and
``ValidOffsetAndEpoch``).

A log end offset with its last fetched epoch, a diverging epoch's end offset, and a
snapshot id (end offset exclusive, epoch of its last record) are all this pair.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

__all__ = ["OffsetAndEpoch", "ValidOffsetAndEpoch"]


@functools.total_ordering
@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    """Ordered as Kafka's ``OffsetAndEpoch.compareTo``: by epoch first, then by offset,
    which is how Raft compares two logs' ends ("at least as up to date").

    Invariant: a value; safe anywhere."""

    offset: int
    epoch: int

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, OffsetAndEpoch):
            return NotImplemented
        return (self.epoch, self.offset) < (other.epoch, other.offset)


class ValidOffsetAndEpochKind(enum.Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"


@dataclass(frozen=True, slots=True)
class ValidOffsetAndEpoch:
    """The leader's verdict on a fetch position (Kafka's ``ValidOffsetAndEpoch``): valid,
    diverging at ``offset_and_epoch`` (truncate there), or below the log start (fetch the
    snapshot ``offset_and_epoch``)."""

    kind: ValidOffsetAndEpochKind
    offset_and_epoch: OffsetAndEpoch

    Kind = ValidOffsetAndEpochKind

    @staticmethod
    def valid(offset_and_epoch: OffsetAndEpoch = OffsetAndEpoch(-1, -1)) -> ValidOffsetAndEpoch:
        return ValidOffsetAndEpoch(ValidOffsetAndEpochKind.VALID, offset_and_epoch)

    @staticmethod
    def diverging(offset_and_epoch: OffsetAndEpoch) -> ValidOffsetAndEpoch:
        return ValidOffsetAndEpoch(ValidOffsetAndEpochKind.DIVERGING, offset_and_epoch)

    @staticmethod
    def snapshot(offset_and_epoch: OffsetAndEpoch) -> ValidOffsetAndEpoch:
        return ValidOffsetAndEpoch(ValidOffsetAndEpochKind.SNAPSHOT, offset_and_epoch)
