"""Values that change at offsets of the metadata log (Kafka's ``LogHistory`` and
``TreeMapLogHistory``): the voter set and kraft.version as of any offset, rolled back
when the log is truncated and trimmed when a snapshot replaces its prefix.

Offset -1 is legal: the bootstrap checkpoint (snapshot 0-0) holds values that precede
every record of the log.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["LogHistory", "LogHistoryEntry"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LogHistoryEntry(Generic[T]):
    offset: int
    value: T


class LogHistory(Generic[T]):
    """Invariant: offsets strictly increase. Event-loop only (the Raft client's poll)."""

    def __init__(self) -> None:
        self._offsets: list[int] = []
        self._values: list[T] = []

    def add_at(self, offset: int, value: T) -> None:
        """ValueError for an offset below -1 or not past the last one."""
        if offset < -1:
            raise ValueError(f"Next offset {offset} must be greater than or equal to -1")
        if self._offsets and offset <= self._offsets[-1]:
            raise ValueError(
                f"Next offset {offset} must be greater than the last offset {self._offsets[-1]}"
            )
        self._offsets.append(offset)
        self._values.append(value)

    def value_at_or_before(self, offset: int) -> T | None:
        index = bisect.bisect_right(self._offsets, offset)
        return self._values[index - 1] if index else None

    def last_entry(self) -> LogHistoryEntry[T] | None:
        if not self._offsets:
            return None
        return LogHistoryEntry(self._offsets[-1], self._values[-1])

    def truncate_new_entries(self, end_offset: int) -> None:
        """Forget the values at ``end_offset`` and after (the log was truncated there)."""
        index = bisect.bisect_left(self._offsets, end_offset)
        del self._offsets[index:], self._values[index:]

    def truncate_old_entries(self, start_offset: int) -> None:
        """Forget the values before ``start_offset`` except the last of them, which is
        still the value at ``start_offset`` unless a later entry replaces it."""
        keep_from = bisect.bisect_right(self._offsets, start_offset) - 1
        if keep_from > 0:
            del self._offsets[:keep_from], self._values[:keep_from]

    def clear(self) -> None:
        self._offsets.clear()
        self._values.clear()
