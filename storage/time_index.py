"""A segment's time index (`<base offset>.timeindex`): timestamp -> offset.

Byte layout, one 12-byte entry, big-endian, no header:

    0  int64  timestamp         the largest record timestamp seen up to the offset (ms)
    8  int32  relative offset   offset - base offset of the segment

An entry (T, O) means every record with a timestamp > T comes after offset O, so a
ListOffsets-by-time lookup starts scanning the log at the offset of the entry with the largest
timestamp <= the target. Timestamps strictly increase along the file: an entry is added only
when the segment's max timestamp grew.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from dataclasses import dataclass

from tiercel.storage.abstract_index import (
    AbstractIndex,
    InvalidOffsetError,
    non_decreasing,
    strictly_increasing,
)

__all__ = ["NO_TIMESTAMP", "TimeIndex", "TimestampOffset"]

# Kafka's RecordBatch.NO_TIMESTAMP
NO_TIMESTAMP = -1

_ENTRY = struct.Struct(">qi")


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A timestamp and the offset from which records may carry larger timestamps."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """Maps timestamps to offsets for one segment (Kafka's `TimeIndex`).

    Invariants: timestamps strictly increase and offsets never decrease from entry to entry;
    offsets are within [base_offset, base_offset + 2**31 - 1]. The last slot is kept free for
    the entry written when the segment is rolled or closed (`skip_full_check`). See
    `AbstractIndex` for the file and the thread/loop contract (lookups and appends are
    event-loop only; construction and `flush` are blocking).
    """

    ENTRY_SIZE = _ENTRY.size
    _TYPECODES = "qi"
    _OFFSET_FIELD = 1

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (NO_TIMESTAMP, base_offset) when there is none."""
        if not self._values:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        return TimestampOffset(self._values[-1], self._base_offset + self._relative_offsets[-1])

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if `timestamp` is larger than the last entry's.

        An equal timestamp is ignored (rolling a segment re-appends the last entry). Raises
        ValueError when the index is full (unless `skip_full_check`, used on roll and close)
        or the timestamp goes backwards, InvalidOffsetError when the offset goes backwards,
        IndexOffsetOverflowError when it is out of range, KafkaStorageError on IO errors.
        """
        entries = self.entries
        if not skip_full_check and self.is_full:
            raise ValueError(f"Attempt to append to a full time index {self._path} ({entries})")
        last = self.last_entry
        if entries and offset < last.offset:
            raise InvalidOffsetError(
                f"Attempt to append an offset ({offset}) to slot {entries} no larger than the "
                f"last offset appended ({last.offset}) to {self._path}"
            )
        if entries and timestamp < last.timestamp:
            raise ValueError(
                f"Attempt to append a timestamp ({timestamp}) to slot {entries} no larger than "
                f"the last timestamp appended ({last.timestamp}) to {self._path}"
            )
        if timestamp <= last.timestamp:
            return
        if entries >= self.max_entries:
            raise ValueError(f"Time index {self._path} has no room for another entry")
        relative = self.relative_offset(offset)
        self._write_entry(_ENTRY.pack(timestamp, relative))
        self._values.append(timestamp)
        self._relative_offsets.append(relative)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= `target_timestamp`, or
        (NO_TIMESTAMP, base_offset) when there is none."""
        slot = bisect_right(self._values, target_timestamp) - 1
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        return TimestampOffset(self._values[slot], self._base_offset + self._relative_offsets[slot])

    def entry(self, n: int) -> TimestampOffset:
        """The n-th entry (from 0); IndexError when there is no such entry."""
        if not 0 <= n < self.entries:
            raise IndexError(
                f"Attempt to fetch entry {n} from time index {self._path} of size {self.entries}"
            )
        return TimestampOffset(self._values[n], self._base_offset + self._relative_offsets[n])

    def _ordering_problem(self) -> str | None:
        if not strictly_increasing(self._values):
            return "timestamps are not strictly increasing"
        if not non_decreasing(self._relative_offsets):
            return "offsets decrease"
        return None
