"""The leader epoch lineage of one partition (Kafka's `LeaderEpochFileCache`).

Each entry says "from `start_offset` on, records were written by the leader of `epoch`". A new
leader appends an entry when it first writes; followers copy entries from the batches they
fetch. Replicas compare lineages through OffsetForLeaderEpoch (`end_offset_for`) to find where
their logs diverge and truncate there instead of at the high watermark, which could lose or
fork acknowledged records (KIP-101, KIP-279).

The entries persist in the partition's `leader-epoch-checkpoint`
(see `storage.checkpoint_file.LeaderEpochCheckpointFile`).
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from tiercel.storage.checkpoint_file import CorruptCheckpointError, LeaderEpochCheckpointFile
from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.topic_partition import TopicPartition

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "LeaderEpochFileCache",
]

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

_Entries = tuple[EpochEntry, ...]


def _epoch(entry: EpochEntry) -> int:
    return entry.epoch


def _start_offset(entry: EpochEntry) -> int:
    return entry.start_offset


def _assigned(entries: _Entries, entry: EpochEntry) -> _Entries | None:
    """`entries` with `entry` stored, or None when Kafka would not store it.

    An entry is stored for a new epoch, or for the latest epoch with a lower start offset (the
    log was truncated below it and rewritten). First the entries it would make non-monotonic
    are dropped: those with an epoch or start offset >= its own, always a suffix.
    """
    if entry.epoch < 0 or entry.start_offset < 0:
        raise ValueError(f"Received invalid partition leader epoch entry {entry}")
    if entries:
        latest = entries[-1]
        if entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
            return None
    keep = len(entries)
    while keep and (
        entries[keep - 1].epoch >= entry.epoch
        or entries[keep - 1].start_offset >= entry.start_offset
    ):
        keep -= 1
    removed = entries[keep:]
    # Replacing a single entry that starts at the same offset is the expected case (no data
    # was written in that epoch); anything else means the log diverged.
    if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
        log.warning(
            "New epoch entry %s caused truncation of conflicting entries %s",
            entry,
            removed,
        )
    return (*entries[:keep], entry)


def _truncated_from_end(entries: _Entries, end_offset: int) -> _Entries:
    """`entries` without those starting at or after `end_offset` (none when it is negative)."""
    if end_offset < 0 or not entries or entries[-1].start_offset < end_offset:
        return entries
    return entries[: bisect_left(entries, end_offset, key=_start_offset)]


def _truncated_from_start(entries: _Entries, start_offset: int) -> _Entries:
    """`entries` without those starting at or before `start_offset`, except that the latest of
    them is kept with its start raised to `start_offset` (it still covers the new log start)."""
    below = bisect_right(entries, start_offset, key=_start_offset)
    if below == 0:
        return entries
    return (EpochEntry(entries[below - 1].epoch, start_offset), *entries[below:])


def _loaded(stored: Sequence[EpochEntry], checkpoint: LeaderEpochCheckpointFile) -> _Entries:
    """The checkpoint's entries assigned in order, as Kafka loads them: entries a crash left
    non-monotonic are dropped rather than trusted."""
    entries: _Entries = ()
    for number, entry in enumerate(stored):
        try:
            entries = _assigned(entries, entry) or entries
        except ValueError as e:
            raise CorruptCheckpointError(checkpoint.path, number + 3, str(e)) from e
    return entries


class LeaderEpochFileCache:
    """The epoch -> start offset entries of one partition, in memory, flushed on demand.

    Invariants: entries are strictly increasing in both epoch and start offset and never
    negative; every mutation preserves this (it is Kafka's, including which entries `assign`
    drops).

    Persistence contract: mutations change memory only and mark the cache dirty; they never
    touch the disk. `flush()` writes the current entries to the checkpoint atomically. The
    entries are one immutable tuple replaced on each mutation, so `flush()` may run in an
    executor while the loop keeps mutating: it writes a consistent snapshot and stays dirty if
    a mutation raced it. Kafka flushes `assign` synchronously so that the checkpoint never
    misses an entry; callers that need that (the leader starting an epoch) await a flush before
    acknowledging; stale entries restored after a crash are fixed by the truncations that log
    loading performs anyway.

    Thread/loop contract: construction reads the checkpoint (blocking: build it in an
    executor); all other methods except `flush` are event-loop only; `flush` is any thread,
    blocking (call from an executor), serialised with other flushes.
    """

    def __init__(
        self, topic_partition: TopicPartition, checkpoint: LeaderEpochCheckpointFile | None
    ) -> None:
        self._topic_partition = topic_partition
        self._checkpoint = checkpoint
        stored: list[EpochEntry] = []
        entries: _Entries = ()
        if checkpoint is not None:
            stored = checkpoint.read()
            entries = _loaded(stored, checkpoint)
        # (mutation count, entries), read and replaced as one value so that a flush in another
        # thread always sees entries together with the count they belong to.
        self._state: tuple[int, _Entries] = (0 if list(entries) == stored else 1, entries)
        self._flushed_version = 0
        self._flush_lock = threading.Lock()

    @property
    def topic_partition(self) -> TopicPartition:
        return self._topic_partition

    @property
    def checkpoint(self) -> LeaderEpochCheckpointFile | None:
        return self._checkpoint

    def _replace(self, entries: _Entries) -> None:
        version, current = self._state
        if entries != current:
            self._state = (version + 1, entries)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        """All entries, oldest first, as an immutable snapshot."""
        return self._state[1]

    @property
    def is_dirty(self) -> bool:
        """True when memory holds changes that `flush()` has not written yet."""
        return self._state[0] != self._flushed_version

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True when the entries changed.

        Stores the entry only for a new epoch, or for the latest epoch with a lower start
        offset; removes the entries it would make non-monotonic. Raises ValueError on negative
        values. Cheap when nothing changes: it is called for every appended batch.
        """
        entries = self._state[1]
        if entries:
            latest = entries[-1]
            if epoch == latest.epoch and start_offset >= latest.start_offset:
                return False
        updated = _assigned(entries, EpochEntry(epoch, start_offset))
        if updated is None:
            return False
        self._replace(updated)
        return True

    @property
    def latest_epoch(self) -> int | None:
        """The current epoch: the latest one with records assigned to it."""
        entries = self._state[1]
        return entries[-1].epoch if entries else None

    def previous_epoch(self) -> int | None:
        """The epoch before the latest one, if any."""
        entries = self._state[1]
        return entries[-2].epoch if len(entries) >= 2 else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose entry covers `offset`: the latest one starting at or before it."""
        entries = self._state[1]
        slot = bisect_right(entries, offset, key=_start_offset)
        return entries[slot - 1].epoch if slot else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetForLeaderEpoch for `requested_epoch`.

        The epoch is the largest known epoch <= the requested one and the end offset is the
        start of the first larger epoch; for the latest epoch it is `log_end_offset`. When
        every known epoch is larger, the requested epoch is returned with the first start
        offset (the older data is gone). (-1, -1) for an undefined or an unknown higher epoch.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        entries = self._state[1]
        if entries and entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect_right(entries, requested_epoch, key=_epoch)
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, entries[0].start_offset
        return entries[higher - 1].epoch, entries[higher].start_offset

    def epoch_entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """The lineage of offsets [start_offset, end_offset), as a segment upload carries it:
        entries clipped as `truncate_from_start(start_offset)` and `truncate_from_end(end_offset)`
        would (a negative `start_offset` clips nothing), without changing this cache."""
        entries = self._state[1]
        if start_offset >= 0:
            entries = _truncated_from_start(entries, start_offset)
        return list(_truncated_from_end(entries, end_offset))

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove the entries starting at or after `end_offset` (the log was truncated there)."""
        self._replace(_truncated_from_end(self._state[1], end_offset))

    def truncate_from_start(self, start_offset: int) -> None:
        """Remove the entries below a new log start offset, keeping the latest of them with its
        start offset raised to `start_offset`, so the new first record still has an epoch."""
        self._replace(_truncated_from_start(self._state[1], start_offset))

    def clear(self) -> None:
        """Remove all entries."""
        self._replace(())

    def flush(self) -> bool:
        """Write the entries to the checkpoint if they changed; True when the file was written.

        Any thread; blocking (fsync): call from an executor. Skips the write, like Kafka, when
        the partition directory has been removed meanwhile. Raises KafkaStorageError on IO
        errors, leaving the cache dirty.
        """
        with self._flush_lock:
            version, entries = self._state
            if version == self._flushed_version:
                return False
            written = self._checkpoint is not None and self._checkpoint.write_if_dir_exists(entries)
            self._flushed_version = version
            return written
