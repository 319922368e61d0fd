"""ProducerStateManager: the idempotent producers of one partition, and their snapshots.

For every producer id the partition keeps a `ProducerStateEntry` (epoch, last five
batches). The leader checks each produced batch against it before offsets are final
(`prepare_append`); followers and log replay update it without checks. The state as of
an offset is saved in ``<offset>.snapshot`` files (`storage.producer_snapshot`): at every
segment roll (at the new segment's base offset) and at clean shutdown (at the log end).
Loading a log reads the latest snapshot and replays the batches after it
(`storage.producer_state_loader`), so a batch retried after a crash is still recognised.

Transactions (KIP-98): every producer's open transaction is tracked by its first offset
(``ongoing``); a COMMIT/ABORT marker moves it to ``unreplicated`` until the high
watermark passes the marker. The smallest first offset of either is the first unstable
offset, from which `UnifiedLog` derives the last stable offset (Kafka's
ProducerStateManager.firstUnstableOffset). Snapshots keep each producer's open
transaction, so a load knows them again.

Transaction verification (KIP-890 part 1, `storage.verification_guard`): with
``transaction_verification_enabled`` (the broker's
transaction.partition.verification.enable), a client's transactional batch of a
producer with no open transaction here is written only with the guard of a
verification the coordinator confirmed, else INVALID_TXN_STATE. The verification
states live in memory only (not in snapshots), as Kafka's do, and expire with
producer.id.expiration.ms when never used.

``map end offset`` is the offset up to which the state reflects the log (Kafka's
``lastMapOffset``); a snapshot is only taken when it moved past the latest one.

Contract: event-loop only once the log is open; before that the loader owns the manager
in its executor thread. Snapshot file writes and deletions go through a `SnapshotIo`
(`storage.snapshot_io`): run at once by a loader, serialised in the executor by an open
log.
Until a write completes its bytes stay in memory, so a reload never misses a snapshot
that is still being written. The one synchronous read on the loop is the reload after a
truncation (a follower diverging from its leader), as Kafka does under its log lock.
"""

from __future__ import annotations

import bisect
import functools
import logging
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.end_txn_marker import EndTransactionMarker
from tiercel.protocol.errors import InvalidTxnStateError
from tiercel.storage.file_names import producer_snapshot_file
from tiercel.storage.log_values import AppendBatch
from tiercel.storage.producer_append_info import AppendOrigin, CompletedTxn, ProducerAppendInfo
from tiercel.storage.producer_snapshot import (
    CorruptSnapshotError,
    decode_snapshot,
    encode_snapshot,
    list_snapshot_offsets,
    read_snapshot_file,
    remove_snapshot_file,
    write_snapshot_file,
)
from tiercel.storage.producer_state_entry import BatchMetadata, ProducerStateEntry, last_sequence
from tiercel.storage.snapshot_io import BlockingSnapshotIo, SnapshotIo
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.verification_guard import (
    SENTINEL,
    VerificationGuard,
    VerificationStateEntry,
)

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "AnalyzedAppend",
    "ProducerStateManager",
    "TxnMetadata",
]

_log: Final = logging.getLogger("tiercel.producer_state")

# producer.id.expiration.ms's default: one day.
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000


class TxnMetadata:
    """An open (``last_offset`` None) or completed but not yet replicated transaction."""

    __slots__ = ("first_offset", "last_offset", "producer_id")

    def __init__(self, producer_id: int, first_offset: int, last_offset: int | None = None) -> None:
        self.producer_id = producer_id
        self.first_offset = first_offset
        self.last_offset = last_offset

    def __repr__(self) -> str:
        return f"TxnMetadata({self.producer_id}, {self.first_offset}, {self.last_offset})"


@dataclass(frozen=True, slots=True)
class AnalyzedAppend:
    """What `ProducerStateManager.prepare_append` found in the batches of one append
    (Kafka's UnifiedLog.analyzeAndValidateProducerState): each producer's update, the
    transactions the markers complete, in the order of the markers in the append (the
    transaction index takes them only in that order), or the batch a client's retry
    duplicates (then nothing is written)."""

    updates: Sequence[ProducerAppendInfo]
    completed_txns: Sequence[CompletedTxn]
    duplicate: BatchMetadata | None = None


_NO_APPEND: Final = AnalyzedAppend((), ())


class ProducerStateManager:
    """Producer state of one partition; see the module docstring for the contract.

    Invariants: ``producers`` holds one entry per producer id with at least one batch
    appended (or loaded) and not expired; ``_snapshots`` is the sorted list of snapshot
    offsets that exist (or are being written); ``_last_snap_offset <= _last_map_offset``
    except right after a load from an older snapshot.
    """

    def __init__(
        self,
        topic_partition: TopicPartition,
        directory: str,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        io: SnapshotIo | None = None,
    ) -> None:
        self.topic_partition = topic_partition
        self.dir = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # Keyed by first offset (Kafka's ongoingTxns / unreplicatedTxns).
        self._ongoing: dict[int, TxnMetadata] = {}
        self._unreplicated: dict[int, TxnMetadata] = {}
        self._io: SnapshotIo = io if io is not None else BlockingSnapshotIo()
        self._snapshots: list[int] = []
        self._unwritten: dict[int, bytes] = {}
        self._last_map_offset = 0
        self._last_snap_offset = 0
        self._closed = False
        self._verification_states: dict[int, VerificationStateEntry] = {}
        # Kafka's ProducerStateManagerConfig.transactionVerificationEnabled. Off for a
        # bare log (tools, tests); the LogManager sets it from the broker config.
        self.transaction_verification_enabled = False

    def set_io(self, io: SnapshotIo) -> None:
        """Route later snapshot jobs through ``io`` (a log opening on the loop)."""
        self._io = io

    # -- state ---------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        return self._last_map_offset

    def update_map_end_offset(self, offset: int) -> None:
        self._last_map_offset = offset

    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        return types.MappingProxyType(self.producers)

    @property
    def is_empty(self) -> bool:
        return not self.producers

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(
            self.topic_partition,
            producer_id,
            current,
            origin,
            self._verification_states.get(producer_id),
        )

    def update(self, info: ProducerAppendInfo) -> None:
        entry = info.to_entry()
        current = self.producers.get(info.producer_id)
        if current is None:
            self.producers[info.producer_id] = entry
        else:
            current.update(entry)
        for first_offset in info.started_txns:
            self._ongoing[first_offset] = TxnMetadata(info.producer_id, first_offset)
        if info.wrote_transactional:
            # A first transactional write or a marker: the transaction is now open (and
            # known to be) or over, so its verification is spent (Kafka's
            # updateProducers); a marker thereby voids a verification still in flight.
            self._verification_states.pop(info.producer_id, None)

    # -- transaction verification (KIP-890 part 1) ----------------------------------------

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    def maybe_start_transaction_verification(
        self, producer_id: int, sequence: int, epoch: int, now_ms: int
    ) -> VerificationGuard:
        """SENTINEL when the producer's transaction is already open here (its first
        write was verified); else the guard of its verification state, made now or
        shared with a verification already under way (Kafka's
        UnifiedLog.maybeStartTransactionVerification)."""
        if self.has_ongoing_transaction(producer_id):
            return SENTINEL
        entry = self._verification_states.get(producer_id)
        if entry is None:
            entry = self._verification_states[producer_id] = VerificationStateEntry(
                now_ms, sequence, epoch
            )
        entry.maybe_update_lowest_sequence_and_epoch(sequence, epoch)
        return entry.guard

    def verification_state_entry(self, producer_id: int) -> VerificationStateEntry | None:
        return self._verification_states.get(producer_id)

    def verification_guard(self, producer_id: int) -> VerificationGuard:
        entry = self._verification_states.get(producer_id)
        return SENTINEL if entry is None else entry.guard

    def _check_verified(self, batch: AppendBatch, guard: VerificationGuard) -> None:
        """INVALID_TXN_STATE for a transactional data batch that would open a
        transaction here without the guard of a confirmed verification (Kafka's
        analyzeAndValidateProducerState and batchMissingRequiredVerification)."""
        if (
            self.transaction_verification_enabled
            and batch.is_transactional
            and not batch.is_control
            and not self.has_ongoing_transaction(batch.producer_id)
            and not self.verification_guard(batch.producer_id).verify(guard)
        ):
            raise InvalidTxnStateError("Record was not part of an ongoing transaction")

    # -- transactions --------------------------------------------------------------------

    @property
    def ongoing_txns(self) -> Mapping[int, TxnMetadata]:
        return types.MappingProxyType(self._ongoing)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction still open or whose marker the
        high watermark has not passed; None when there is none."""
        firsts = [*self._ongoing, *self._unreplicated]
        return min(firsts) if firsts else None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is: the first offset of the oldest transaction of
        another producer still open, else just past its marker (what the transaction
        index records with an aborted transaction)."""
        others = [
            first
            for first, txn in self._ongoing.items()
            if txn.producer_id != completed.producer_id
        ]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """The marker of ``completed`` is written: its transaction stays unstable until
        the high watermark passes the marker."""
        txn = self._ongoing.pop(completed.first_offset, None)
        if txn is None:
            txn = TxnMetadata(completed.producer_id, completed.first_offset)
        txn.last_offset = completed.last_offset
        self._unreplicated[completed.first_offset] = txn

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        self._remove_unreplicated_txns(high_watermark)

    def _remove_unreplicated_txns(self, offset: int) -> None:
        done = [
            first
            for first, txn in self._unreplicated.items()
            if txn.last_offset is not None and txn.last_offset < offset
        ]
        for first in done:
            del self._unreplicated[first]

    def _clear(self) -> None:
        self.producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self.producers[entry.producer_id] = entry
        first = entry.current_txn_first_offset
        if first is not None:
            self._ongoing[first] = TxnMetadata(entry.producer_id, first)

    def prepare_append(
        self,
        batches: Sequence[AppendBatch],
        origin: AppendOrigin,
        verification_guard: VerificationGuard = SENTINEL,
    ) -> AnalyzedAppend:
        """Check ``batches`` (offsets assigned, not yet written) against the state and
        return what must be applied once they are written (`update` each producer's
        info, then complete the transactions in order), or the batch a client retry
        duplicates. Raises the producer's error (INVALID_PRODUCER_EPOCH,
        OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE) and changes nothing if a batch
        is not acceptable. ``verification_guard`` is the guard of the verification a
        leader's first transactional write waited for."""
        updates: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for batch in batches:
            producer_id = batch.producer_id
            if producer_id < 0:
                continue
            delta = batch.last_offset - batch.base_offset
            last_seq = last_sequence(batch.base_sequence, delta)
            if origin is AppendOrigin.CLIENT:
                entry = self.producers.get(producer_id)
                if entry is not None:
                    duplicate = entry.find_duplicate_batch(
                        batch.producer_epoch, batch.base_sequence, last_seq
                    )
                    if duplicate is not None:
                        return AnalyzedAppend((), (), duplicate)
            if origin is not AppendOrigin.REPLICATION:
                self._check_verified(batch, verification_guard)
            info = updates.get(producer_id)
            if info is None:
                info = updates[producer_id] = self.prepare_update(producer_id, origin)
            if batch.is_control:
                if batch.end_txn_marker is not None:
                    txn = info.append_end_txn_marker(
                        batch.end_txn_marker,
                        batch.producer_epoch,
                        batch.base_offset,
                        batch.max_timestamp,
                    )
                    if txn is not None:
                        completed.append(txn)
                continue
            info.append_data_batch(
                batch.producer_epoch,
                batch.base_sequence,
                last_seq,
                batch.max_timestamp,
                batch.base_offset,
                batch.last_offset,
                batch.is_transactional,
            )
        if not updates:
            return _NO_APPEND
        return AnalyzedAppend(list(updates.values()), completed)

    def replay_batch(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        base_offset: int,
        last_offset: int,
        max_timestamp: int,
        is_transactional: bool = False,
    ) -> None:
        """Apply a batch already in the log (recovery, truncation reload): no checks."""
        info = self.prepare_update(producer_id, AppendOrigin.REPLICATION)
        delta = last_offset - base_offset
        info.append_data_batch(
            epoch,
            base_sequence,
            last_sequence(base_sequence, delta),
            max_timestamp,
            base_offset,
            last_offset,
            is_transactional,
        )
        self.update(info)

    def replay_end_txn_marker(
        self,
        producer_id: int,
        epoch: int,
        marker: EndTransactionMarker,
        offset: int,
        timestamp: int,
    ) -> CompletedTxn | None:
        """Apply a marker already in the log; the transaction it closed, which the
        caller completes (`complete_txn`) after recording it if it was aborted."""
        info = self.prepare_update(producer_id, AppendOrigin.REPLICATION)
        completed = info.append_end_txn_marker(marker, epoch, offset, timestamp)
        self.update(info)
        return completed

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms, and verifications
        started that long ago and never used; returns how many producers."""
        expired = [pid for pid, entry in self.producers.items() if self._is_expired(entry, now_ms)]
        for producer_id in expired:
            del self.producers[producer_id]
        lingering = [
            pid
            for pid, state in self._verification_states.items()
            if now_ms - state.timestamp >= self.producer_id_expiration_ms
        ]
        for producer_id in lingering:
            del self._verification_states[producer_id]
        return len(expired)

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    # -- snapshots -----------------------------------------------------------------------

    @property
    def snapshot_offsets(self) -> tuple[int, ...]:
        return tuple(self._snapshots)

    @property
    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots[-1] if self._snapshots else None

    def snapshot_written(self, offset: int) -> bool:
        """Whether the snapshot at ``offset`` exists and its file is written."""
        return offset in self._snapshots and offset not in self._unwritten

    def take_snapshot(self) -> None:
        """Snapshot the state at the map end offset, unless one exists there already.
        The bytes are built now; the file is written by the `SnapshotIo`."""
        offset = self._last_map_offset
        if offset <= self._last_snap_offset:
            return
        data = encode_snapshot(self.producers.values())
        if offset not in self._snapshots:
            bisect.insort(self._snapshots, offset)
        self._unwritten[offset] = data
        self._last_snap_offset = offset
        self._io.submit(
            functools.partial(self._write, self._snapshot_path(offset), data),
            functools.partial(self._written, offset, data),
        )
        log_event(
            _log,
            logging.INFO,
            "producer_snapshot_taken",
            partition=str(self.topic_partition),
            offset=offset,
            producers=len(self.producers),
        )

    def _write(self, path: str, data: bytes) -> None:
        """*Blocking.* Skipped once the log is deleted: its directory may be reused."""
        if not self._closed:
            try:
                write_snapshot_file(path, data)
            except FileNotFoundError:
                if not self._closed:
                    raise

    def _remove(self, path: str) -> None:
        """*Blocking.* Skipped once the log is deleted, like `_write`: the path may
        belong to a recreated partition by now."""
        if not self._closed:
            remove_snapshot_file(path)

    def _written(self, offset: int, data: bytes) -> None:
        if self._unwritten.get(offset) is data:
            del self._unwritten[offset]

    def _read_snapshot(self, offset: int) -> list[ProducerStateEntry]:
        data = self._unwritten.get(offset)
        if data is not None:
            return decode_snapshot(data)
        return read_snapshot_file(self._snapshot_path(offset))

    def delete_snapshot(self, offset: int) -> None:
        """Forget the snapshot at ``offset`` and delete its file (after any pending write)."""
        i = bisect.bisect_left(self._snapshots, offset)
        if i == len(self._snapshots) or self._snapshots[i] != offset:
            return
        del self._snapshots[i]
        self._unwritten.pop(offset, None)
        self._io.submit(functools.partial(self._remove, self._snapshot_path(offset)))

    def _snapshot_path(self, offset: int) -> str:
        return producer_snapshot_file(self.dir, offset)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """*Blocking* (a loader's job). Learn the snapshot files on disk, deleting those
        that match no segment, except the newest one past every segment base: the one a
        clean shutdown wrote at the log end (Kafka's ``removeStraySnapshots``)."""
        bases = set(segment_base_offsets)
        offsets = list_snapshot_offsets(self.dir)
        strays = [offset for offset in offsets if offset not in bases]
        doomed = strays[:-1]
        if strays and bases and strays[-1] < max(bases):
            doomed = strays
        self._snapshots = [offset for offset in offsets if offset not in set(doomed)]
        for offset in doomed:
            self._io.submit(functools.partial(self._remove, self._snapshot_path(offset)))

    # -- truncation and the log start offset ---------------------------------------------

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Make the state that of ``log_end_offset``: drop snapshots outside
        (log start, log end], and unless the state is already there, reload the latest
        snapshot left (the caller then replays the log from `map_end_offset`)."""
        for offset in list(self._snapshots):
            if offset > log_end_offset or offset <= log_start_offset:
                self.delete_snapshot(offset)
        if log_end_offset != self._last_map_offset:
            self._clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        while self._snapshots:
            offset = self._snapshots[-1]
            try:
                entries = self._read_snapshot(offset)
            except (CorruptSnapshotError, OSError) as e:
                log_event(
                    _log,
                    logging.WARNING,
                    "producer_snapshot_unreadable",
                    partition=str(self.topic_partition),
                    offset=offset,
                    reason=str(e),
                )
                self.delete_snapshot(offset)
                continue
            for entry in entries:
                if not self._is_expired(entry, now_ms):
                    self._load_entry(entry)
            self._last_snap_offset = self._last_map_offset = offset
            return
        self._last_snap_offset = self._last_map_offset = log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (the log restarts empty at ``offset``)."""
        self._clear()
        for snapshot in list(self._snapshots):
            self.delete_snapshot(snapshot)
        self._last_snap_offset = 0
        self._last_map_offset = offset

    def load_snapshot(self, offset: int, data: bytes, now_ms: int) -> None:
        """Take the state a snapshot made elsewhere holds at ``offset`` and keep it as
        this log's snapshot there: a follower restarting at its leader's local start
        with the producer snapshot of the remote segment below it (Kafka's
        buildProducerSnapshotFile, then reloadSnapshots). CorruptSnapshotError if
        ``data`` is not a snapshot."""
        entries = decode_snapshot(data)
        self._clear()
        for entry in entries:
            if not self._is_expired(entry, now_ms):
                self._load_entry(entry)
        if offset not in self._snapshots:
            bisect.insort(self._snapshots, offset)
        self._unwritten[offset] = data
        self._last_snap_offset = self._last_map_offset = offset
        self._io.submit(
            functools.partial(self._write, self._snapshot_path(offset), data),
            functools.partial(self._written, offset, data),
        )

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """The log start moved (retention, DeleteRecords). Producers are kept until they
        expire, as in Kafka since KIP-360: their last batch may be gone, but a retry of it
        must still be recognised rather than written twice."""
        self._remove_unreplicated_txns(log_start_offset)
        self._last_map_offset = max(self._last_map_offset, log_start_offset)
        latest = self.latest_snapshot_offset
        self._last_snap_offset = latest if latest is not None else log_start_offset

    def close(self) -> None:
        """The log is being deleted: no further snapshot file is written."""
        self._closed = True
