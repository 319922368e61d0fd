"""read_committed over the remote tier: which batches of a planned partition belong to
aborted transactions, and how far the tier alone decides (KIP-98, as a Kafka consumer
with ``isolation.level=read_committed`` applies a Fetch's aborted-transaction list).

- **Aborted transactions** come from the ``.txnindex`` objects of the plan's uploads
  (Kafka's AbortedTxn entries: producer id, first offset, last offset = the ABORT
  marker's). An entry counts when its marker lies in the part of its upload the plan
  reads (on the winning lineage, not shadowed by a newer upload), so an entry of a
  truncated lineage never drops a record of the current one. An upload without the
  object has no abort to index (it is uploaded only when the segment has one).
- A batch is **dropped** when it is transactional (attribute bit 4) and its producer id
  has an aborted transaction whose range [first, marker] holds the batch's base offset;
  control batches (the markers) are never records. Decided per batch, never per record:
  a batch belongs to one transaction whole.
- **The tier's last stable offset**: the leader copies only segments below the LSO, so
  every transaction with tiered records is decided, but its marker may still be in a
  segment not tiered yet. The producer snapshot uploaded with the last planned upload
  (the producer state at its end) lists the transactions still open there; read_committed
  stops at the first offset of the oldest of them (Kafka's firstUnstableOffset), so that
  every record the tier returns has its marker, and its abort entry, in the tier. Past
  that point the broker tail (read_committed Fetch) or a later read has them.

Blocking; any thread.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Final, Literal

from tiercel.protocol.record_batch import RecordBatchHeader
from tiercel.storage.abstract_index import CorruptIndexError
from tiercel.storage.producer_snapshot import CorruptSnapshotError, decode_snapshot
from tiercel.storage.transaction_index import AbortedTxn, decode_aborted_txns
from tiercel.tiered.reader.scan_plan import PartitionPlan, RemoteTierError
from tiercel.tiered.rsm.object_layout import object_key
from tiercel.tiered.rsm.object_store import ObjectStore
from tiercel.tiered.rsm.remote_storage_manager import IndexType, RemoteResourceNotFoundError

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "AbortedTransactions",
    "FetchAbortFilter",
    "IsolationLevel",
    "aborted_transactions",
    "tier_last_stable_offset",
]

READ_UNCOMMITTED: Final = "read_uncommitted"
READ_COMMITTED: Final = "read_committed"
IsolationLevel = Literal["read_uncommitted", "read_committed"]


class AbortedTransactions:
    """Aborted transactions by producer id, for `drops`. Invariant: per producer, the
    (first, last) ranges are sorted by first offset and do not overlap (a producer has
    one transaction open at a time)."""

    __slots__ = ("_firsts", "_lasts")

    def __init__(self, entries: Iterable[tuple[int, int, int]] = ()) -> None:
        """``entries``: (producer id, first offset, last offset) of each abort."""
        by_producer: defaultdict[int, set[tuple[int, int]]] = defaultdict(set)
        for producer_id, first, last in entries:
            by_producer[producer_id].add((first, last))
        self._firsts: dict[int, list[int]] = {}
        self._lasts: dict[int, list[int]] = {}
        for producer_id, ranges in by_producer.items():
            ordered = sorted(ranges)
            self._firsts[producer_id] = [first for first, _ in ordered]
            self._lasts[producer_id] = [last for _, last in ordered]

    def __len__(self) -> int:
        return sum(len(firsts) for firsts in self._firsts.values())

    def entries(self) -> tuple[tuple[int, int, int], ...]:
        """(producer id, first, last) of each abort: what a Spark slice carries."""
        return tuple(
            (producer_id, first, last)
            for producer_id, firsts in sorted(self._firsts.items())
            for first, last in zip(firsts, self._lasts[producer_id], strict=True)
        )

    def drops(self, header: RecordBatchHeader) -> bool:
        """Whether the batch's records belong to an aborted transaction."""
        if not header.is_transactional or header.is_control:
            return False
        firsts = self._firsts.get(header.producer_id)
        if firsts is None:
            return False
        i = bisect.bisect_right(firsts, header.base_offset) - 1
        return i >= 0 and header.base_offset <= self._lasts[header.producer_id][i]


def _txn_index_entries(store: ObjectStore, key: str) -> Sequence[AbortedTxn]:
    try:
        data = store.get(key)
    except RemoteResourceNotFoundError:
        return ()
    try:
        return decode_aborted_txns(data, key)
    except CorruptIndexError as e:
        raise RemoteTierError(f"{key}: {e}") from e


def aborted_transactions(store: ObjectStore, plan: PartitionPlan) -> AbortedTransactions:
    """The aborts indexed in the plan's uploads (see the module docstring); one GET of
    each upload's ``.txnindex``."""
    found = []
    for segment_range in plan.ranges:
        key = object_key(segment_range.segment, IndexType.TRANSACTION.value)
        for entry in _txn_index_entries(store, key):
            if segment_range.first_offset <= entry.last_offset <= segment_range.last_offset:
                found.append((entry.producer_id, entry.first_offset, entry.last_offset))
    return AbortedTransactions(found)


def tier_last_stable_offset(store: ObjectStore, plan: PartitionPlan) -> int | None:
    """The first offset of the oldest transaction still open at the end of the plan's
    last upload, by its producer snapshot; None when none is open, or the upload has
    no snapshot (every transaction then counts as decided, as the copier's rule says).
    RemoteTierError for a corrupt snapshot."""
    if not plan.ranges or plan.ranges[-1].last_offset != plan.ranges[-1].segment.end_offset:
        return None  # (an upload cut where it leaves the lineage: no snapshot there)
    last = plan.ranges[-1]
    key = object_key(last.segment, IndexType.PRODUCER_SNAPSHOT.value)
    try:
        data = store.get(key)
    except RemoteResourceNotFoundError:
        return None
    try:
        entries = decode_snapshot(data)
    except CorruptSnapshotError as e:
        raise RemoteTierError(f"{key}: {e}") from e
    open_firsts = [
        e.current_txn_first_offset for e in entries if e.current_txn_first_offset is not None
    ]
    return min(open_firsts, default=None)


class FetchAbortFilter:
    """A read_committed consumer's filter over one Fetch response (Kafka's
    CompletedFetch with its abortedProducerIds and abortedTransactions queue): the
    response lists (producer id, first offset) of each aborted transaction overlapping
    it; walking its batches in order, a producer's transactional batches are dropped
    from that first offset until its next control batch, the ABORT marker (a producer
    has one transaction open at a time, so the first marker after the first offset is
    that transaction's)."""

    __slots__ = ("_active", "_pending")

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        """``aborted``: (producer id, first offset) pairs of the response."""
        self._pending = sorted(((first, pid) for pid, first in aborted), reverse=True)
        self._active: set[int] = set()

    def drops(self, header: RecordBatchHeader) -> bool:
        """Whether the batch (the next of the response, in order) is aborted data."""
        while self._pending and self._pending[-1][0] <= header.last_offset:
            self._active.add(self._pending.pop()[1])
        if header.is_control:
            self._active.discard(header.producer_id)
            return False
        return header.is_transactional and header.producer_id in self._active
