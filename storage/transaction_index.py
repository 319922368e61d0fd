"""A segment's transaction index, ``<base offset>.txnindex`` (Kafka's TransactionIndex).

One 34-byte entry per aborted transaction whose ABORT marker lies in the segment, in
the order the markers were appended, big-endian, no header (Kafka's AbortedTxn):

    offset  size  field
         0     2  version              int16  0
         2     8  producer_id          int64
        10     8  first_offset         int64  the transaction's first offset
        18     8  last_offset          int64  the offset of its ABORT marker
        26     8  last_stable_offset   int64  the partition's LSO once it completed

A read_committed fetch gets the aborted transactions overlapping what it reads, and
its consumer drops their records. ``last_stable_offset`` bounds the search: once an
entry's LSO reaches past the fetched range, no later segment can hold an aborted
transaction that started inside it (Kafka's collectAbortedTxns).

As in Kafka the file exists only once an entry was appended. The entries are also kept
in memory: aborts are rare, and a fetch must not read a file to learn there are none.

Contract: event-loop only, except what the owning segment runs *blocking* in an
executor (flush) or at load (reading an existing file).
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from typing import Final

from tiercel.storage.abstract_index import CorruptIndexError

__all__ = [
    "ABORTED_TXN_SIZE",
    "AbortedTxn",
    "TransactionIndex",
    "TxnIndexSearchResult",
    "decode_aborted_txns",
]

_ENTRY: Final = struct.Struct(">hqqqq")
ABORTED_TXN_SIZE: Final = _ENTRY.size  # 34
_VERSION: Final = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its producer, first and last (marker) offsets, and the
    last stable offset of the partition when it completed."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """The aborted transactions one index holds for a fetched range; ``is_complete``
    when no later segment can hold more (Kafka's TxnIndexSearchResult)."""

    aborted: list[AbortedTxn]
    is_complete: bool


def decode_aborted_txns(data: bytes, path: str) -> list[AbortedTxn]:
    """The entries of a transaction index's bytes (a remote ``.txnindex`` object too);
    CorruptIndexError naming ``path`` if they are not whole version-0 entries."""
    if len(data) % ABORTED_TXN_SIZE:
        raise CorruptIndexError(
            f"transaction index {path} of {len(data)} bytes ends in a partial entry"
        )
    entries = []
    for version, producer_id, first, last, lso in _ENTRY.iter_unpack(data):
        if version != _VERSION:
            raise CorruptIndexError(f"aborted transaction version {version} in {path}")
        entries.append(AbortedTxn(producer_id, first, last, lso))
    return entries


class TransactionIndex:
    """Invariants: ``entries`` is what the file holds (no file while it is empty and
    none was ever written); last offsets strictly increase along it, and
    ``_last_offsets`` lists them (a fetch starts its search by bisection)."""

    def __init__(self, path: str, start_offset: int, *, file_exists: bool) -> None:
        """*Blocking* when ``file_exists`` and the file is there (it is read); a new
        segment's stale file of the same name is emptied."""
        self.path = path
        self.start_offset = start_offset
        self._fd = -1
        self._corrupt: str | None = None
        self.entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []
        if not os.path.exists(path):
            return
        if not file_exists:
            self._open()
            os.ftruncate(self._fd, 0)
            return
        with open(path, "rb") as f:
            data = f.read()
        try:
            self.entries = decode_aborted_txns(data, path)
            self._last_offsets = [entry.last_offset for entry in self.entries]
        except CorruptIndexError as e:
            # Reported by the sanity check: the segment is recovered, which resets it.
            self._corrupt = str(e)

    @property
    def is_empty(self) -> bool:
        """No aborted transaction is indexed (Kafka's TransactionIndex.isEmpty)."""
        return not self.entries

    def _open(self) -> int:
        if self._fd < 0:
            flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
            self._fd = os.open(self.path, flags, 0o644)
        return self._fd

    def append(self, entry: AbortedTxn) -> None:
        """Add an aborted transaction; its marker must follow every one indexed."""
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise ValueError(
                f"last offset {entry.last_offset} of an aborted transaction does not follow "
                f"{self.entries[-1].last_offset} in {self.path}"
            )
        data = entry.encode()
        fd = self._open()
        if os.write(fd, data) != len(data):
            os.ftruncate(fd, len(self.entries) * ABORTED_TXN_SIZE)
            raise OSError(f"short write to {self.path}")
        self.entries.append(entry)
        self._last_offsets.append(entry.last_offset)

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset).

        Entries ending before ``fetch_offset`` are skipped: none of them can end the
        search, as Kafka's full scan would (an entry's LSO is at most the first offset
        of any transaction still open or started after it)."""
        found = []
        start = bisect.bisect_left(self._last_offsets, fetch_offset)
        for entry in self.entries[start:]:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or past ``offset``."""
        keep = bisect.bisect_left(self._last_offsets, offset)
        if keep != len(self.entries):
            del self.entries[keep:], self._last_offsets[keep:]
            os.ftruncate(self._open(), keep * ABORTED_TXN_SIZE)

    def reset(self) -> None:
        """Empty the index (a segment being recovered rebuilds it)."""
        self.entries = []
        self._last_offsets = []
        self._corrupt = None
        if self._fd >= 0 or os.path.exists(self.path):
            os.ftruncate(self._open(), 0)

    def sanity_check(self) -> None:
        """CorruptIndexError if the file is not whole entries of this segment."""
        if self._corrupt is not None:
            raise CorruptIndexError(self._corrupt)
        for entry in self.entries:
            if entry.last_offset < self.start_offset:
                raise CorruptIndexError(
                    f"last offset {entry.last_offset} of an aborted transaction in "
                    f"{self.path} is below the segment's base offset {self.start_offset}"
                )

    def flush(self) -> None:
        """*Blocking.* fsync the file, if there is one."""
        if self._fd >= 0:
            os.fsync(self._fd)

    def rename_to(self, path: str) -> None:
        """Rename the file (if any); an open descriptor stays valid."""
        if self._fd >= 0 or os.path.exists(self.path):
            os.rename(self.path, path)
        self.path = path

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
