"""OffsetMap: the key -> latest offset map a cleaning round builds over the dirty section
(Kafka's SkimpyOffsetMap), bounded by the memory it may use.

Kafka stores a 16-byte hash and an 8-byte offset per key in a fixed buffer. Here keys
are kept whole in a dict (no hash collision can ever drop a live record) and the bound
is on an estimate of what the dict really holds: each entry costs its key's length plus
``ENTRY_OVERHEAD`` bytes (the bytes and int objects and the dict slot, measured with
tracemalloc on CPython 3.11). The map counts as full once it holds ``load_factor`` of
its memory, Kafka's ``log.cleaner.io.buffer.load.factor`` (0.9).
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_LOAD_FACTOR", "ENTRY_OVERHEAD", "OffsetMap"]

ENTRY_OVERHEAD: Final = 121
DEFAULT_LOAD_FACTOR: Final = 0.9


class OffsetMap:
    """Invariants: ``latest_offset`` is -1 on a cleared map, otherwise the last offset
    put or advanced to; ``used_bytes`` is the estimated size of the entries.

    Thread contract: owned by one cleaning at a time; it is filled and read in the
    cleaner's executor thread while the event loop only hands it from step to step.
    """

    def __init__(self, memory_bytes: int, load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        self.memory_bytes = memory_bytes
        self.load_factor = load_factor
        self._limit = int(memory_bytes * load_factor)
        self._offsets: dict[bytes, int] = {}
        self.used_bytes = 0
        self.latest_offset = -1

    def clear(self) -> None:
        self._offsets = {}
        self.used_bytes = 0
        self.latest_offset = -1

    @property
    def size(self) -> int:
        """Number of keys."""
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return self.used_bytes >= self._limit

    def can_hold(self, entries: int, key_size: int) -> bool:
        """Whether ``entries`` keys of ``key_size`` bytes fit below the load factor: a map
        that cannot hold two makes no progress (Kafka refuses to start then)."""
        return entries * (key_size + ENTRY_OVERHEAD) <= self._limit

    def put(self, key: bytes, offset: int) -> None:
        """Record ``offset`` as the latest for ``key`` (offsets only grow)."""
        offsets = self._offsets
        if key not in offsets:
            self.used_bytes += len(key) + ENTRY_OVERHEAD
        offsets[key] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1 when the map does not hold it."""
        return self._offsets.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset
