"""A segment's offset index (`<base offset>.index`): offset -> position in the `.log` file.

Byte layout, one 8-byte entry per indexed batch, big-endian, no header:

    0  int32  relative offset   offset - base offset of the segment
    4  int32  position          byte position of the batch in the segment's .log file

Sparse: `LogSegment` adds an entry after every `index.interval.bytes` of appended data, keyed
by the batch's last offset; a read looks up the nearest entry at or below the wanted offset
and scans forward in the log from its position.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from tiercel.storage.abstract_index import (
    AbstractIndex,
    InvalidOffsetError,
    non_decreasing,
    strictly_increasing,
)

__all__ = ["OffsetIndex", "OffsetPosition"]

_ENTRY = struct.Struct(">ii")
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An offset and the byte position in the segment's log where its batch starts."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """Maps offsets to log positions for one segment (Kafka's `OffsetIndex`).

    Invariants: offsets strictly increase from entry to entry and are within
    [base_offset, base_offset + 2**31 - 1]; positions are non-negative int32s. See
    `AbstractIndex` for the file and the thread/loop contract (lookups and appends are
    event-loop only; construction and `flush` are blocking).
    """

    ENTRY_SIZE = _ENTRY.size
    _TYPECODES = "ii"
    _OFFSET_FIELD = 0

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when there is none."""
        relative = self._relative_offsets
        return self._base_offset + relative[-1] if relative else self._base_offset

    def append(self, offset: int, position: int) -> None:
        """Add an entry; `offset` must be larger than the last entry's.

        Raises ValueError when the index is full or the position is not an int32 >= 0,
        InvalidOffsetError when the offset does not increase, IndexOffsetOverflowError when it
        is out of the index's range, KafkaStorageError on IO errors.
        """
        if self.is_full:
            raise ValueError(f"Attempt to append to a full index {self._path} ({self.entries})")
        if self._relative_offsets and offset <= self.last_offset:
            raise InvalidOffsetError(
                f"Attempt to append an offset {offset} to position {self.entries} no larger "
                f"than the last offset appended ({self.last_offset}) to {self._path}"
            )
        relative = self.relative_offset(offset)
        if not 0 <= position <= _INT32_MAX:
            raise ValueError(f"Position {position} out of range for index {self._path}")
        self._write_entry(_ENTRY.pack(relative, position))
        self._relative_offsets.append(relative)
        self._values.append(position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= `target_offset`, or (base_offset, 0)."""
        slot = bisect_right(self._relative_offsets, target_offset - self._base_offset) - 1
        if slot < 0:
            return OffsetPosition(self._base_offset, 0)
        return OffsetPosition(self._base_offset + self._relative_offsets[slot], self._values[slot])

    def fetch_upper_bound_offset(self, position: int) -> int | None:
        """The offset of the first entry at or past ``position``: no batch before that
        position holds a larger offset (Kafka's fetchUpperBoundOffset); None if none."""
        slot = bisect_left(self._values, position)
        if slot >= len(self._values):
            return None
        return self._base_offset + self._relative_offsets[slot]

    def entry(self, n: int) -> OffsetPosition:
        """The n-th entry (from 0); IndexError when there is no such entry."""
        if not 0 <= n < self.entries:
            raise IndexError(
                f"Attempt to fetch entry {n} from index {self._path} of size {self.entries}"
            )
        return OffsetPosition(self._base_offset + self._relative_offsets[n], self._values[n])

    def _ordering_problem(self) -> str | None:
        if not strictly_increasing(self._relative_offsets):
            return "offsets are not strictly increasing"
        if self._values and self._values[0] < 0:
            return "negative position"
        if not non_decreasing(self._values):
            return "positions decrease"
        return None
