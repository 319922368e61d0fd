"""Reads below the local log start, from the remote tier (Kafka's RemoteLogManager.read,
RemoteLogReader and findOffsetByTimestamp).

A remote read finds the COPY_SEGMENT_FINISHED segment holding the fetch offset in the
offset's leader epoch, asks the remote offset index (`RemoteIndexCache`) where to start,
fetches only the byte range it needs and drops the whole batches before the offset: the
answer is the bytes a local read of the same segment would have given — the batch holding
the offset, then whole batches up to the size limit (the last one possibly cut, as Kafka
returns it; the whole first batch when ``min_one_message``, KIP-74, and nothing when
that batch does not fit without it, as Kafka's RemoteLogManager.read). An offset the
segment does not reach (compacted away) continues in the next segment of the lineage, as
Kafka's findNextSegmentMetadata.

A read_committed read (``FetchIsolation.TXN_COMMITTED``) also carries the aborted
transactions overlapping the bytes returned, as a local read does (Kafka's
RemoteLogManager.addAbortedTransactions): the upper bound is the remote offset index's
first entry past those bytes, else the segment's end; the transaction indexes of this
segment, then of the following segments of the lineage, then of the local segments,
are searched until one says no later segment can add any; remote segments uploaded
with no aborted transaction (their metadata's ``txn_idx_empty``, KIP-1058) are passed
over, neither fetched nor visited (the metadata manager's
``next_segment_with_txn_index``). Only segments below the last
stable offset are tiered, so every transaction a remote read touches is decided.

Thread contract: the coroutines run on the event loop, where they read the RLMM and the
epoch cache; every object-store and index-file access runs in the reader pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tiercel.protocol.errors import OffsetOutOfRangeError, ReplicaNotAvailableError
from tiercel.protocol.record_batch import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, read_header
from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.leader_epoch_cache import LeaderEpochFileCache
from tiercel.storage.local_log import LocalLog
from tiercel.storage.log_values import (
    AbortedTransaction,
    FetchDataInfo,
    FetchIsolation,
    LogOffsetMetadata,
    TimestampAndOffset,
)
from tiercel.storage.timestamp_lookup import first_record_at_or_after
from tiercel.storage.topic_partition import TopicIdPartition
from tiercel.storage.transaction_index import AbortedTxn, TxnIndexSearchResult
from tiercel.tiered.leader_epoch_lineage import (
    filtered_leader_epoch_map,
    lineage_end_offset,
)
from tiercel.tiered.remote_index_cache import RemoteIndexCache
from tiercel.tiered.remote_storage_thread_pool import RemoteStorageThreadPool
from tiercel.tiered.rlm_quota import RLMQuota
from tiercel.tiered.rlmm.remote_log_metadata_manager import RemoteLogMetadataManager
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteStorageManager,
)

__all__ = ["RemoteLogReader", "RemoteStorageFetchInfo", "read_from_segment"]

# Bytes fetched past the wanted range to cover the distance from the index entry to the
# batch holding the offset (one index.interval.bytes, 4096 by default, and some).
_SCAN_SLACK: Final = 16 * 1024


@dataclass(frozen=True, slots=True)
class RemoteStorageFetchInfo:
    """One partition's share of a fetch that must read the remote tier (Kafka's
    RemoteStorageFetchInfo)."""

    fetch_max_bytes: int
    min_one_message: bool
    topic_id_partition: TopicIdPartition
    fetch_offset: int
    fetch_isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK
    """TXN_COMMITTED: the read lists the aborted transactions it overlaps."""


class _SegmentBytes:
    """A growing prefix of a remote segment from ``start``, fetched range by range."""

    def __init__(self, rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, start: int):
        self._rsm = rsm
        self._metadata = metadata
        self.start = start
        self.data = bytearray()
        self.exhausted = start >= metadata.segment_size_in_bytes

    def ensure(self, length: int) -> bool:
        """Have at least ``length`` bytes (from ``start``) if the segment has them."""
        size = self._metadata.segment_size_in_bytes
        while len(self.data) < length and not self.exhausted:
            begin = self.start + len(self.data)
            end = min(self.start + length, size)
            if begin >= end:
                self.exhausted = True
                break
            chunk = self._rsm.fetch_log_segment(self._metadata, begin, end - 1)
            self.data += chunk
            self.exhausted = len(chunk) < end - begin or end == size
        return len(self.data) >= length


def read_from_segment(
    rsm: RemoteStorageManager,
    index_cache: RemoteIndexCache,
    metadata: RemoteLogSegmentMetadata,
    offset: int,
    max_bytes: int,
    min_one_message: bool,
    end_offset: int | None = None,
) -> tuple[LogOffsetMetadata, bytes] | None:
    """Bytes of ``metadata``'s segment from the batch holding ``offset``, as a local
    `LogSegment.read` gives them, without the batches from ``end_offset`` on (where
    the segment leaves the reader's lineage); None when no batch of the segment reaches
    ``offset``. Blocking: the reader pool."""
    segment = _SegmentBytes(rsm, metadata, index_cache.lookup_offset(metadata, offset))
    segment.ensure(max_bytes + _SCAN_SLACK)
    position = 0
    while segment.ensure(position + RECORD_BATCH_OVERHEAD):
        header = read_header(segment.data, position)
        batch_size = header.batch_length + LOG_OVERHEAD
        if header.last_offset >= offset:
            first = segment.start + position
            found = LogOffsetMetadata(offset, metadata.start_offset, first)
            if not min_one_message and batch_size > max_bytes:
                # No fragment of the first batch: Kafka's RemoteLogManager.read answers
                # an empty read when that batch exceeds the bytes left (Fetch v3+).
                return found, b""
            limit = max(max_bytes, batch_size) if min_one_message else max_bytes
            segment.ensure(position + limit)
            data = bytes(segment.data[position : position + limit])
            return found, data if end_offset is None else _cut_at(data, end_offset)
        position += batch_size
    return None


def _cut_at(data: bytes, end_offset: int) -> bytes:
    """``data`` without its batches from the one starting at ``end_offset`` on."""
    position = 0
    while position + RECORD_BATCH_OVERHEAD <= len(data):
        header = read_header(data, position)
        if header.base_offset >= end_offset:
            return data[:position]
        position += header.batch_length + LOG_OVERHEAD
    return data


def fetch_upper_bound_offset(
    index_cache: RemoteIndexCache,
    metadata: RemoteLogSegmentMetadata,
    start: LogOffsetMetadata,
    size: int,
) -> int:
    """An offset no record of the ``size`` bytes read from ``start`` reaches: the remote
    offset index's first entry past them, else the offset after the segment (Kafka's
    addAbortedTransactions). Blocking: the reader pool."""
    index = index_cache.get_index_entry(metadata).offset_index
    upper = index.fetch_upper_bound_offset(start.relative_position_in_segment + size)
    return upper if upper is not None else metadata.end_offset + 1


def collect_aborted_in_segment(
    index_cache: RemoteIndexCache,
    metadata: RemoteLogSegmentMetadata,
    start_offset: int,
    upper_bound: int,
) -> TxnIndexSearchResult:
    """What the segment's transaction index holds for [start_offset, upper_bound)
    (fetched once through the RSM, then cached). Blocking: the reader pool."""
    txn_index = index_cache.transaction_index(metadata)
    return txn_index.collect_aborted_txns(start_offset, upper_bound)


def timestamp_in_segment(
    rsm: RemoteStorageManager,
    index_cache: RemoteIndexCache,
    metadata: RemoteLogSegmentMetadata,
    timestamp: int,
    starting_offset: int,
    end_offset: int | None = None,
) -> TimestampAndOffset | None:
    """The first record of the segment at or after ``starting_offset``, below
    ``end_offset`` (where the segment leaves the reader's lineage), with a timestamp
    >= ``timestamp`` (Kafka's RemoteLogManager.lookupTimestamp). Blocking: the pool."""
    start = index_cache.lookup_timestamp(metadata, timestamp, starting_offset)
    segment = _SegmentBytes(rsm, metadata, start)
    position = 0
    while segment.ensure(position + RECORD_BATCH_OVERHEAD):
        header = read_header(segment.data, position)
        batch_size = header.batch_length + LOG_OVERHEAD
        if end_offset is not None and header.base_offset >= end_offset:
            return None
        if header.max_timestamp >= timestamp and header.last_offset >= starting_offset:
            if not segment.ensure(position + batch_size):
                return None
            batch = bytes(segment.data[position : position + batch_size])
            found = first_record_at_or_after(batch, timestamp, starting_offset)
            if found is not None and (end_offset is None or found[1] < end_offset):
                epoch = header.partition_leader_epoch
                return TimestampAndOffset(found[0], found[1], epoch if epoch >= 0 else None)
        position += batch_size
    return None


def _next_epoch(entries: Sequence[EpochEntry], epoch: int) -> int | None:
    return next((entry.epoch for entry in entries if entry.epoch > epoch), None)


class RemoteLogReader:
    """Remote reads and timestamp lookups of the partitions this broker hosts, through
    ``pool`` (see the module docstring). The RemoteLogManager builds one at start-up
    (`create`) and calls ``index_cache.remove`` for every remote segment it deletes."""

    def __init__(
        self,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        index_cache: RemoteIndexCache,
        pool: RemoteStorageThreadPool,
        fetch_quota: RLMQuota | None = None,
    ) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.index_cache = index_cache
        self.pool = pool
        # remote.log.manager.fetch.max.bytes.per.second over every remote read.
        self.fetch_quota = fetch_quota or RLMQuota(2**63 - 1)

    @classmethod
    def create(
        cls,
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        log_dir: str,
        reader_threads: int,
        max_pending_tasks: int,
        index_cache_size_bytes: int,
        fetch_max_bytes_per_second: int = 2**63 - 1,
    ) -> RemoteLogReader:
        """A reader over ``remote.log.reader.threads``, ``remote.log.reader.max.pending.
        tasks``, an index cache of ``remote.log.index.file.cache.total.size.bytes``
        under the first log dir, and ``remote.log.manager.fetch.max.bytes.per.second``.
        Blocking (the cache loads its files): an executor."""
        pool = RemoteStorageThreadPool("remote-log-reader", reader_threads, max_pending_tasks)
        cache = RemoteIndexCache(rsm, log_dir, index_cache_size_bytes)
        return cls(rsm, rlmm, cache, pool, RLMQuota(fetch_max_bytes_per_second))

    def fetch_throttle_time_s(self) -> float:
        """How long remote fetches must wait for the fetch quota (0: they may read)."""
        return self.fetch_quota.throttle_time_s(1)

    def close(self, timeout_s: float = 10.0) -> None:
        """*Blocking*: stop the pool (queued reads are dropped), wait up to
        ``timeout_s`` for the reads running (Kafka's 10 s for the reader pool), then
        close the index cache. The storage manager stays open: its owner closes it
        after this (Kafka's RemoteLogManager.close)."""
        self.pool.shutdown()
        self.pool.join(timeout_s)
        self.index_cache.close()

    def async_read(
        self,
        fetch_info: RemoteStorageFetchInfo,
        epoch_cache: LeaderEpochFileCache,
        local_log: LocalLog | None = None,
    ) -> asyncio.Task[FetchDataInfo]:
        """Start a remote read (Kafka's asyncRead); RejectedExecutionError at once when
        the pool has no room. Event-loop only."""
        self.pool.try_reserve()
        task = asyncio.get_running_loop().create_task(self.read(fetch_info, epoch_cache, local_log))
        task.add_done_callback(self._read_done)
        return task

    def _read_done(self, task: asyncio.Task[object]) -> None:
        self.pool.release()
        if not task.cancelled():
            task.exception()  # retrieved: a fetch that stopped waiting has reported it

    async def read(
        self,
        fetch_info: RemoteStorageFetchInfo,
        epoch_cache: LeaderEpochFileCache,
        local_log: LocalLog | None = None,
    ) -> FetchDataInfo:
        """Kafka's RemoteLogManager.read; OffsetOutOfRangeError when the remote tier has
        no segment for the offset's epoch, ReplicaNotAvailableError while the metadata
        manager is not ready for the partition. A read_committed read's aborted
        transactions are searched in ``local_log`` too once the remote segments do not
        settle them (the partition's local log, on the event loop)."""
        offset = fetch_info.fetch_offset
        tip = fetch_info.topic_id_partition
        self._ensure_ready(tip)
        epoch = epoch_cache.epoch_for_offset(offset)
        metadata = None
        if epoch is not None:
            metadata = self.rlmm.remote_log_segment_metadata(tip, epoch, offset)
        if metadata is None:
            raise OffsetOutOfRangeError(
                f"offset {offset} of leader epoch {epoch} of {tip.topic_partition} "
                "is not in the remote tier"
            )
        lineage = filtered_leader_epoch_map(epoch_cache.entries)
        while metadata is not None:
            # After an unclean election the segment may go on with another lineage's
            # records: they stop here, and the next read finds this lineage's segment.
            from_offset = max(offset, metadata.start_offset)  # the next segment's start
            end_offset = lineage_end_offset(metadata, lineage, from_offset)
            found = await self.pool.run(
                read_from_segment,
                self.rsm,
                self.index_cache,
                metadata,
                offset,
                fetch_info.fetch_max_bytes,
                fetch_info.min_one_message,
                end_offset,
            )
            if found is not None:
                self.fetch_quota.record(len(found[1]))
                info = FetchDataInfo(found[0], found[1])
                if fetch_info.fetch_isolation is not FetchIsolation.TXN_COMMITTED:
                    return info
                return await self._add_aborted_transactions(
                    offset, metadata, info, epoch_cache, local_log
                )
            metadata = self._next_segment(metadata, epoch_cache)
        if fetch_info.fetch_isolation is FetchIsolation.TXN_COMMITTED:
            return FetchDataInfo(LogOffsetMetadata(offset), b"", [])
        return FetchDataInfo(LogOffsetMetadata(offset), b"")

    async def _add_aborted_transactions(
        self,
        start_offset: int,
        metadata: RemoteLogSegmentMetadata,
        info: FetchDataInfo,
        epoch_cache: LeaderEpochFileCache,
        local_log: LocalLog | None,
    ) -> FetchDataInfo:
        """``info`` with the aborted transactions overlapping it (Kafka's
        addAbortedTransactions and collectAbortedTransactions; see the module docstring).
        Nothing read, none listed."""
        if not info.records:
            return FetchDataInfo(info.fetch_offset_metadata, info.records, [])
        upper = await self.pool.run(
            fetch_upper_bound_offset,
            self.index_cache,
            metadata,
            info.fetch_offset_metadata,
            len(info.records),
        )
        found: list[AbortedTxn] = []
        current: RemoteLogSegmentMetadata | None = metadata
        complete = False
        while current is not None and not complete:
            # A segment uploaded with an empty transaction index (KIP-1058's
            # txnIdxEmpty) can neither list nor settle anything: neither fetched nor
            # visited. Without that, a read_committed fetch on a tier of hundreds of
            # segments fetched every later segment's indexes (Kafka before KIP-1058).
            if not current.txn_idx_empty:
                result = await self.pool.run(
                    collect_aborted_in_segment,
                    self.index_cache,
                    current,
                    start_offset,
                    upper,
                )
                found.extend(result.aborted)
                complete = result.is_complete
            if not complete:
                current = self._next_segment_with_txn_index(current, epoch_cache)
        if not complete and local_log is not None:
            found.extend(local_log.collect_aborted_transactions(start_offset, upper))
        # A transaction's entry sits in the segment of its marker only, but segments
        # overlapping after an unclean election may both hold it: listed once (Kafka
        # collects them into a set).
        aborted = list(
            dict.fromkeys(AbortedTransaction(t.producer_id, t.first_offset) for t in found)
        )
        return FetchDataInfo(info.fetch_offset_metadata, info.records, aborted)

    def _ensure_ready(self, tip: TopicIdPartition) -> None:
        """Until the metadata manager has read the partition's metadata back (after a
        restart, a new assignment) its view is empty or partial: the retriable
        REPLICA_NOT_AVAILABLE of Kafka's RemotePartitionMetadataStore, never "out of
        range", which would send a consumer to reset its position."""
        if not self.rlmm.is_ready(tip):
            raise ReplicaNotAvailableError(
                f"the remote log metadata of {tip.topic_partition} is not read back yet"
            )

    def _next_segment_with_txn_index(
        self, metadata: RemoteLogSegmentMetadata, epoch_cache: LeaderEpochFileCache
    ) -> RemoteLogSegmentMetadata | None:
        """Kafka's findNextSegmentWithTxnIndex: from the offset after ``metadata``, the
        first segment with a transaction index in that offset's epoch, else in each
        later epoch of the lineage from its start."""
        offset = metadata.end_offset + 1
        first_epoch = epoch_cache.epoch_for_offset(offset)
        if first_epoch is None:
            return None
        tip = metadata.topic_id_partition
        for entry in epoch_cache.entries:
            if entry.epoch >= first_epoch:
                found = self.rlmm.next_segment_with_txn_index(
                    tip, entry.epoch, max(entry.start_offset, offset)
                )
                if found is not None:
                    return found
        return None

    def _next_segment(
        self, metadata: RemoteLogSegmentMetadata, epoch_cache: LeaderEpochFileCache
    ) -> RemoteLogSegmentMetadata | None:
        """Kafka's findNextSegmentMetadata: the segment holding the offset after it."""
        next_offset = metadata.end_offset + 1
        epoch = epoch_cache.epoch_for_offset(next_offset)
        if epoch is None:
            return None
        tip = metadata.topic_id_partition
        return self.rlmm.remote_log_segment_metadata(tip, epoch, next_offset)

    async def find_offset_by_timestamp(
        self,
        tip: TopicIdPartition,
        timestamp: int,
        starting_offset: int,
        epoch_cache: LeaderEpochFileCache,
        log_end_offset: int,
    ) -> TimestampAndOffset | None:
        """Kafka's findOffsetByTimestamp: from the epoch of ``starting_offset`` on, the
        finished segments holding records of the lineage whose max timestamp reaches
        ``timestamp`` are searched, in their lineage part only, until one has a record
        at or after ``starting_offset``; None when no remote segment has one.
        RejectedExecutionError when the reader pool has no room (Kafka submits these
        lookups to the same pool)."""
        self.pool.try_reserve()
        task = asyncio.get_running_loop().create_task(
            self._find_offset_by_timestamp(
                tip, timestamp, starting_offset, epoch_cache, log_end_offset
            )
        )
        # Released when the lookup itself ends, not when its caller stops waiting (a
        # ListOffsets timeout): a call stuck on the store keeps its place in the bound.
        task.add_done_callback(self._read_done)
        return await asyncio.shield(task)

    async def _find_offset_by_timestamp(
        self,
        tip: TopicIdPartition,
        timestamp: int,
        starting_offset: int,
        epoch_cache: LeaderEpochFileCache,
        log_end_offset: int,
    ) -> TimestampAndOffset | None:
        self._ensure_ready(tip)
        entries = epoch_cache.entries
        lineage = filtered_leader_epoch_map(entries)
        epoch = epoch_cache.epoch_for_offset(starting_offset)
        while epoch is not None:
            for metadata in self.rlmm.list_remote_log_segments(tip, epoch):
                start = max(starting_offset, metadata.start_offset)
                if (
                    metadata.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                    or metadata.max_timestamp_ms < timestamp
                    or metadata.end_offset < start
                ):
                    continue
                # Only the segment's records of this lineage (Kafka checks the whole
                # segment is on it, isRemoteSegmentWithinLeaderEpochs; a segment kept
                # for its lineage prefix after an unclean election counts up to there).
                end = min(lineage_end_offset(metadata, lineage, start), log_end_offset)
                if end <= start:
                    continue
                found = await self.pool.run(
                    timestamp_in_segment,
                    self.rsm,
                    self.index_cache,
                    metadata,
                    timestamp,
                    starting_offset,
                    end,
                )
                if found is not None:
                    return found
            epoch = _next_epoch(entries, epoch)
        return None
