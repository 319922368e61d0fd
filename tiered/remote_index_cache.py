"""The indexes of remote segments, fetched once and kept on local disk (Kafka's
RemoteIndexCache).

A remote read needs the segment's offset index (where the batch holding an offset
starts) and a timestamp lookup its time index. Fetching them for every read would cost a
round trip to the object store each time, so they are kept under
``<first log dir>/remote-log-index-cache/``, one file per index, named as Kafka names
them::

    <start offset>_<segment id>.index        offset index (8-byte entries)
    <start offset>_<segment id>.timeindex    time index (12-byte entries)
    <start offset>_<segment id>.txnindex     transaction index (empty when the segment has
                                             none, as Kafka keeps it)

where the segment id is the Kafka Uuid string of the upload. Files are written to a
``.tmp`` name and renamed, so a crash leaves either a whole file or a ``.tmp`` one, which
the next start removes with any entry whose indexes are missing or fail their sanity check.
The cache holds entries up to ``remote.log.index.file.cache.total.size.bytes`` in total
file size, evicting the least recently used (Kafka bounds it by size since KAFKA-15481).

An entry forgotten because its segment was deleted (`remove`) leaves the map and the
size at once, but its files are unlinked by the cache's own cleaner thread, as Kafka's
RemoteIndexCache queues removed entries for its ``remote-log-index-cleaner`` thread:
`remove` is called from the event loop, which must do no file I/O. An entry evicted
past the size bound is unlinked at once by the reader thread that evicted it (a later
fetch of the same segment writes the same names, so its removal must not lag behind).

Thread contract: blocking, any thread (the RemoteLogManager's reader pool), but for
`remove`, which never touches the disk. One lock guards the entry map; fetches run
outside it, so a slow object store never blocks lookups of entries already cached.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from tiercel.storage.abstract_index import CorruptIndexError
from tiercel.storage.checkpoint_file import kafka_str_to_uuid, uuid_to_kafka_str
from tiercel.storage.offset_index import OffsetIndex
from tiercel.storage.time_index import TimeIndex, TimestampOffset
from tiercel.storage.transaction_index import TransactionIndex
from tiercel.tiered.rsm.remote_storage_manager import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
)

__all__ = ["DIR_NAME", "RemoteIndexCache", "RemoteIndexEntry", "remote_index_file_prefix"]

_log: Final = logging.getLogger("tiercel.tiered")

DIR_NAME: Final = "remote-log-index-cache"
TMP_SUFFIX: Final = ".tmp"
DELETED_SUFFIX: Final = ".deleted"
# remote.log.index.file.cache.total.size.bytes default (Kafka: 1 GiB)
DEFAULT_MAX_SIZE_BYTES: Final = 1024 * 1024 * 1024
_SUFFIXES: Final = (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION)


def remote_index_file_prefix(metadata: RemoteLogSegmentMetadata) -> str:
    """``<start offset>_<segment id>``: Kafka's generateFileNamePrefixForIndex."""
    segment_id = metadata.remote_log_segment_id.id
    return f"{metadata.start_offset}_{uuid_to_kafka_str(segment_id)}"


@dataclass(slots=True)
class RemoteIndexEntry:
    """One remote segment's indexes, loaded in memory from their cached files (Kafka's
    RemoteIndexCache.Entry). Lookups never touch the files, so an entry evicted while a
    reader still holds it keeps answering."""

    offset_index: OffsetIndex
    time_index: TimeIndex
    txn_index: TransactionIndex
    """The segment's aborted transactions, for read_committed remote fetches (Kafka's
    Entry.txnIndex); empty when the segment was uploaded without a ``.txnindex``."""
    size_in_bytes: int

    def lookup_offset(self, offset: int) -> int:
        """Position of the indexed batch at or below ``offset`` (0 before the first)."""
        return self.offset_index.lookup(offset).position

    def lookup_timestamp(self, timestamp: int, starting_offset: int) -> int:
        """Position from which to scan for the first record with a timestamp >=
        ``timestamp`` at or after ``starting_offset`` (Kafka's lookupTimestamp)."""
        hint: TimestampOffset = self.time_index.lookup(timestamp)
        return self.lookup_offset(max(starting_offset, hint.offset))

    def paths(self) -> list[str]:
        return [self.offset_index.path, self.time_index.path, self.txn_index.path]


class RemoteIndexCache:
    """See the module docstring. Invariant: ``_size`` is the sum of the entries'
    ``size_in_bytes``, and at most ``max_size_bytes`` once a `get_index_entry` returns
    (the entry just fetched may alone exceed it: it is then served and evicted)."""

    def __init__(
        self,
        rsm: RemoteStorageManager,
        log_dir: str,
        max_size_bytes: int = DEFAULT_MAX_SIZE_BYTES,
    ) -> None:
        """Blocking: loads what an earlier run left in ``<log_dir>/remote-log-index-cache``."""
        self._rsm = rsm
        self.cache_dir = os.path.join(log_dir, DIR_NAME)
        self.max_size_bytes = max_size_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[uuid.UUID, RemoteIndexEntry] = OrderedDict()
        self._size = 0
        # Files of removed entries, for the cleaner thread (None: stop), started with
        # the first removal.
        self._expired: queue.SimpleQueue[tuple[uuid.UUID, list[str]] | None] = queue.SimpleQueue()
        self._cleaner: threading.Thread | None = None
        os.makedirs(self.cache_dir, exist_ok=True)
        self._init()

    @property
    def size_in_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, segment_id: uuid.UUID) -> bool:
        return segment_id in self._entries

    def lookup_offset(self, metadata: RemoteLogSegmentMetadata, offset: int) -> int:
        """Where in the remote segment to start reading for ``offset``."""
        return self.get_index_entry(metadata).lookup_offset(offset)

    def lookup_timestamp(
        self, metadata: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int
    ) -> int:
        return self.get_index_entry(metadata).lookup_timestamp(timestamp, starting_offset)

    def transaction_index(self, metadata: RemoteLogSegmentMetadata) -> TransactionIndex:
        """The segment's aborted transactions (Kafka's getTransactionIndex)."""
        return self.get_index_entry(metadata).txn_index

    def get_index_entry(self, metadata: RemoteLogSegmentMetadata) -> RemoteIndexEntry:
        """The segment's indexes, from the cache or fetched through the RSM (then
        cached). RemoteStorageError when the fetch fails."""
        segment_id = metadata.remote_log_segment_id.id
        with self._lock:
            entry = self._entries.get(segment_id)
            if entry is not None:
                self._entries.move_to_end(segment_id)
                return entry
        entry = self._fetch(metadata)
        with self._lock:
            existing = self._entries.get(segment_id)
            if existing is not None:  # another reader fetched it meanwhile: same files
                self._entries.move_to_end(segment_id)
                return existing
            self._put(segment_id, entry)
            self._evict_over_bound()
        return entry

    def remove(self, segment_id: uuid.UUID) -> None:
        """Forget a deleted remote segment (Kafka's remove): out of the map and the
        size now, its files unlinked by the cleaner thread. No disk access: the event
        loop calls it."""
        with self._lock:
            entry = self._entries.pop(segment_id, None)
            if entry is None:
                return
            self._size -= entry.size_in_bytes
            if self._cleaner is None:
                self._cleaner = threading.Thread(
                    target=self._clean, name="remote-log-index-cleaner", daemon=True
                )
                self._cleaner.start()
            self._expired.put((segment_id, entry.paths()))

    def close(self, timeout_s: float = 10.0) -> None:
        """*Blocking*: close the entries' indexes and let the cleaner thread finish
        what was queued, for at most ``timeout_s``."""
        with self._lock:
            for entry in self._entries.values():
                entry.offset_index.close()
                entry.time_index.close()
            cleaner = self._cleaner
            self._expired.put(None)
        if cleaner is not None:
            cleaner.join(timeout_s)

    def _clean(self) -> None:
        """The cleaner thread: unlink removed entries' files, in the order removed."""
        while (item := self._expired.get()) is not None:
            segment_id, paths = item
            with self._lock:
                # Fetched again meanwhile (a read of the segment was in flight when it
                # was deleted): those are the new entry's files now.
                cached_again = segment_id in self._entries
            if not cached_again:
                _remove_files(paths)

    # -- internals ----------------------------------------------------------------------

    def _put(self, segment_id: uuid.UUID, entry: RemoteIndexEntry) -> None:
        self._entries[segment_id] = entry
        self._size += entry.size_in_bytes

    def _evict_over_bound(self) -> None:
        while self._size > self.max_size_bytes and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self._size -= evicted.size_in_bytes
            _remove_files(evicted.paths())

    def _fetch(self, metadata: RemoteLogSegmentMetadata) -> RemoteIndexEntry:
        prefix = os.path.join(self.cache_dir, remote_index_file_prefix(metadata))
        paths: dict[IndexType, str] = {}
        for index_type in _SUFFIXES:
            try:
                data = self._rsm.fetch_index(metadata, index_type)
            except RemoteResourceNotFoundError:
                if index_type is not IndexType.TRANSACTION:
                    raise
                data = b""  # no aborted transactions: an empty index, as Kafka keeps
            path = f"{prefix}.{index_type.value}"
            _write_via_tmp(path, data)
            paths[index_type] = path
        entry = _open_entry(metadata.start_offset, paths)
        if entry is None:
            _remove_files(list(paths.values()))
            raise CorruptIndexError(f"the remote indexes of {metadata} are corrupt")
        return entry

    def _init(self) -> None:
        """Kafka's RemoteIndexCache.init: drop leftovers, load every complete entry."""
        found: dict[tuple[int, uuid.UUID], dict[IndexType, str]] = {}
        by_suffix = {f".{t.value}": t for t in _SUFFIXES}
        for name in sorted(os.listdir(self.cache_dir)):
            path = os.path.join(self.cache_dir, name)
            stem, suffix = os.path.splitext(name)
            key = _parse_prefix(stem)
            if suffix in (TMP_SUFFIX, DELETED_SUFFIX) or suffix not in by_suffix or key is None:
                _remove_files([path])
                continue
            found.setdefault(key, {})[by_suffix[suffix]] = path
        for (start_offset, segment_id), paths in found.items():
            entry = _open_entry(start_offset, paths)
            if entry is None:
                _log.info("discarding the cached remote indexes %s", sorted(paths.values()))
                _remove_files(list(paths.values()))
                continue
            self._put(segment_id, entry)
        self._evict_over_bound()


def _parse_prefix(stem: str) -> tuple[int, uuid.UUID] | None:
    offset, _, segment_id = stem.partition("_")
    try:
        return int(offset), kafka_str_to_uuid(segment_id)
    except ValueError:
        return None


def _open_entry(start_offset: int, paths: dict[IndexType, str]) -> RemoteIndexEntry | None:
    """The entry over these files, or None unless all three are there (Kafka's rule)
    and the indexes pass their sanity checks. The transaction index is read into memory
    whole (34 bytes per aborted transaction): no descriptor stays open."""
    offset_path = paths.get(IndexType.OFFSET)
    time_path = paths.get(IndexType.TIMESTAMP)
    txn_path = paths.get(IndexType.TRANSACTION)
    if offset_path is None or time_path is None or txn_path is None:
        return None
    # Read-only indexes: their whole file is their size bound.
    offset_size, time_size = os.path.getsize(offset_path), os.path.getsize(time_path)
    offset_index = OffsetIndex(offset_path, start_offset, offset_size)
    time_index = TimeIndex(time_path, start_offset, time_size)
    txn_index = TransactionIndex(txn_path, start_offset, file_exists=True)
    try:
        offset_index.sanity_check()
        time_index.sanity_check()
        txn_index.sanity_check()
    except CorruptIndexError:
        offset_index.close()
        time_index.close()
        return None
    size = offset_size + time_size + os.path.getsize(txn_path)
    return RemoteIndexEntry(offset_index, time_index, txn_index, size)


def _write_via_tmp(path: str, data: bytes) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}{TMP_SUFFIX}"
    try:
        with open(tmp, "wb") as file:
            file.write(data)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


def _remove_files(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
