"""What a cleaning round knows of the transactions it walks through (Kafka's
CleanedTransactionMetadata): which data batches belong to an aborted transaction, which
COMMIT/ABORT markers no longer have any data batch before them, and which aborted
transactions the cleaned segments' transaction indexes must still list.

The round reads its batches in offset order from the log start, so a producer's
transaction is seen from its first data batch to its marker:

- the aborted transactions of the range (from the transaction indexes) become
  "ongoing" for their producer once the walk reaches their first offset; a
  transactional data batch of such a producer is aborted data, to be dropped;
- any other transactional data batch makes its producer's transaction "ongoing
  committed";
- an ABORT marker ends its producer's aborted transaction: when the walk saw a data
  batch of it (the round drops them), the marker must stay and its `AbortedTxn` goes to
  the cleaned segment's index (a reader that fetched some of that data before the
  round still finds the marker ending it); when it saw none, the transaction is gone
  from the log and the marker may go;
- a COMMIT marker may go when no data batch of its transaction was seen: Kafka keeps
  it as long as any (even a batch emptied for its producer's sequence) is left;
- an empty control batch was already emptied by an earlier round and may go; another
  control type is kept.

"May go" is what the round's filter (`cleaner.CleaningRound`) turns into the delete
horizon of KIP-534, as for tombstones: set on the first round that finds the marker
removable, the marker is dropped by the first round after it.

Owned by one round, used by its executor thread in batch order (one group after the
other); not thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence

from tiercel.protocol.end_txn_marker import read_end_txn_marker
from tiercel.protocol.record_batch import RecordBatchHeader
from tiercel.storage.log_values import Buffer
from tiercel.storage.transaction_index import AbortedTxn

__all__ = ["CleanedTransactions"]


class _OngoingAbort:
    """An aborted transaction the walk is inside of, and whether it saw its data."""

    __slots__ = ("seen_data", "txn")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.seen_data = False


class CleanedTransactions:
    """Invariants: ``_pending`` holds the round's aborted transactions not reached yet,
    the one with the highest first offset first (popped from the end);
    ``_ongoing_aborted`` and ``_ongoing_committed`` hold, per producer, the transaction
    the walk is inside of; ``_retained_aborted`` the index entries of the markers kept
    since `take_retained_aborted` last ran."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda txn: txn.first_offset, reverse=True)
        self._ongoing_aborted: dict[int, _OngoingAbort] = {}
        self._ongoing_committed: set[int] = set()
        self._retained_aborted: list[AbortedTxn] = []

    def on_data_batch(self, header: RecordBatchHeader) -> bool:
        """Walk over a data batch; True when it is aborted data (to drop)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing.seen_data = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: RecordBatchHeader, batch: Buffer) -> bool:
        """Walk over a control batch (its whole bytes); True when no data of its
        transaction is left, so that it may go once its delete horizon has passed.
        InvalidRecordError when its record is not a control record."""
        self._reach(header.last_offset)
        if header.records_count == 0:
            return True  # emptied by an earlier round
        marker = read_end_txn_marker(batch)
        if marker is None:
            return False  # not a transaction marker: kept
        producer_id = header.producer_id
        if marker.is_abort:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing.seen_data:
                self._retained_aborted.append(ongoing.txn)
                return False
            return True
        if producer_id in self._ongoing_committed:
            self._ongoing_committed.discard(producer_id)
            return False
        return True

    def take_retained_aborted(self) -> list[AbortedTxn]:
        """The aborted transactions whose ABORT markers were kept since the last call,
        in marker order: the entries of the cleaned segment's transaction index."""
        retained, self._retained_aborted = self._retained_aborted, []
        return retained

    def _reach(self, offset: int) -> None:
        """Start every aborted transaction beginning at or before ``offset``; a producer
        already inside one keeps it (Kafka's getOrElseUpdate)."""
        pending = self._pending
        while pending and pending[-1].first_offset <= offset:
            txn = pending.pop()
            self._ongoing_aborted.setdefault(txn.producer_id, _OngoingAbort(txn))
