"""Rebuilding a partition's producer state from its snapshots and its log
(Kafka's ``UnifiedLog.rebuildProducerState``).

The latest snapshot at or below the target offset is loaded (after a crash the one
before it, see `_step_back_one_snapshot`), then every batch from its offset up to the
target is replayed from the segments (headers only: the producer id,
epoch, sequence and offsets are all in the 61-byte batch header). After a clean shutdown
of a log that has no snapshot at all (one written before snapshots existed) nothing is
replayed: empty snapshots are written at the last segment bases and the log end instead,
as Kafka does for logs that never saw an idempotent producer.

Replaying a COMMIT/ABORT marker closes its producer's transaction. After a crash the
transaction indexes of the recovered segments are rebuilt the same way
(`rebuild_txn_indexes`): the state as of the first recovered segment is loaded, and
every aborted transaction whose marker is replayed is appended to its segment's index
with the last stable offset at that point (Kafka's LogSegment.recover).

*Blocking* when it has to read: a loader runs it in its executor thread; a truncation
runs it on the loop, where the replay covers at most the segment that was cut.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.end_txn_marker import read_end_txn_marker
from tiercel.protocol.errors import KafkaError
from tiercel.storage.log_segment import BatchPosition, LogSegment
from tiercel.storage.producer_state import ProducerStateManager
from tiercel.storage.snapshot_io import Job
from tiercel.storage.transaction_index import AbortedTxn

__all__ = ["rebuild_producer_state", "rebuild_txn_indexes"]

_log: Final = logging.getLogger("tiercel.producer_state")


def rebuild_producer_state(
    manager: ProducerStateManager,
    segments: Sequence[LogSegment],
    log_start_offset: int,
    last_offset: int,
    reload_from_clean_shutdown: bool,
    now_ms: int,
) -> None:
    """Make ``manager`` the producer state of the log as of ``last_offset`` (exclusive)."""
    offsets_to_snapshot = {last_offset}
    if segments:
        offsets_to_snapshot.add(segments[-1].base_offset)
        if len(segments) > 1:
            offsets_to_snapshot.add(segments[-2].base_offset)
    if manager.latest_snapshot_offset is None and reload_from_clean_shutdown:
        for offset in sorted(offsets_to_snapshot):
            manager.update_map_end_offset(offset)
            manager.take_snapshot()
        return
    if not reload_from_clean_shutdown:
        _step_back_one_snapshot(manager, segments, last_offset)
    is_empty_before_truncation = manager.is_empty and manager.map_end_offset >= last_offset
    manager.truncate_and_reload(log_start_offset, last_offset, now_ms)
    if last_offset > manager.map_end_offset and not is_empty_before_truncation:
        for segment, end in _segments_between(segments, manager.map_end_offset, last_offset):
            start = max(segment.base_offset, manager.map_end_offset, log_start_offset)
            manager.update_map_end_offset(start)
            if segment.base_offset in offsets_to_snapshot:
                manager.take_snapshot()
            _replay(manager, segment, start, min(end, last_offset))
    manager.update_map_end_offset(last_offset)
    manager.take_snapshot()


def _step_back_one_snapshot(
    manager: ProducerStateManager, segments: Sequence[LogSegment], last_offset: int
) -> None:
    """After a crash, replay from the snapshot before the latest one.

    A snapshot keeps only each producer's last batch (Kafka's format), so a producer's
    batches still in flight across the latest segment roll would no longer be known as
    duplicates when retried after the crash. Rebuilding from one snapshot earlier, the
    replay of the log restores every producer's last five batches over the last two
    segments; the dropped snapshot is taken again on the way."""
    offsets = [offset for offset in manager.snapshot_offsets if offset <= last_offset]
    if len(offsets) >= 2:
        manager.delete_snapshot(offsets[-1])
    elif offsets and len(segments) >= 2 and offsets[0] <= segments[1].base_offset:
        # The only snapshot is the first roll's: replaying the first segment instead
        # costs one segment of headers too.
        manager.delete_snapshot(offsets[0])


def _segments_between(
    segments: Sequence[LogSegment], start: int, end: int
) -> list[tuple[LogSegment, int]]:
    """Each segment holding offsets in [start, end), with the next segment's base (or a
    bound past every offset for the last one)."""
    result = []
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else 2**63 - 1
        if next_base > start and segment.base_offset < end:
            result.append((segment, next_base))
    return result


def _replay(
    manager: ProducerStateManager,
    segment: LogSegment,
    start: int,
    end: int,
    index_aborted: bool = False,
) -> None:
    """Apply the segment's batches from the one holding ``start`` up to ``end``;
    ``index_aborted``: append the aborted transactions to the segment's index."""
    first = segment.translate_offset(start)
    if first is None:
        return
    for batch in segment.batches_from(first.position):
        header = batch.header
        if header.base_offset >= end:
            break
        if not header.has_producer_id:
            continue
        if header.is_control:
            _replay_marker(manager, segment, batch, index_aborted)
        else:
            manager.replay_batch(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
                header.is_transactional,
            )


def _replay_marker(
    manager: ProducerStateManager, segment: LogSegment, batch: BatchPosition, index_aborted: bool
) -> None:
    header = batch.header
    try:
        marker = read_end_txn_marker(segment.read_batch(batch))
    except KafkaError as e:
        # A CRC-checked batch the leader wrote: not expected; the marker is skipped.
        log_event(
            _log,
            logging.WARNING,
            "unreadable_txn_marker",
            segment=segment.log_path,
            offset=header.base_offset,
            reason=e.message,
        )
        return
    if marker is None:
        return
    completed = manager.replay_end_txn_marker(
        header.producer_id, header.producer_epoch, marker, header.base_offset, header.max_timestamp
    )
    if completed is None:
        return
    if index_aborted and completed.is_aborted:
        segment.update_txn_index(
            AbortedTxn(
                completed.producer_id,
                completed.first_offset,
                completed.last_offset,
                manager.last_stable_offset(completed),
            )
        )
    manager.complete_txn(completed)


class _NoSnapshotWrites:
    """A `SnapshotIo` dropping every job: the scratch state `rebuild_txn_indexes`
    loads must not write or delete the log's snapshot files."""

    def submit(self, job: Job, then: Job | None = None) -> None:
        pass


def rebuild_txn_indexes(
    manager: ProducerStateManager,
    segments: Sequence[LogSegment],
    recovered: Sequence[LogSegment],
    log_start_offset: int,
    now_ms: int,
) -> None:
    """Re-derive the transaction indexes of ``recovered`` (emptied by
    `LogSegment.recover`), using ``manager`` (a fresh one of the log, its snapshot
    files unread) as scratch: the state as of the first recovered segment comes from
    the latest snapshot at or below it and the batches after that snapshot."""
    if not recovered:
        return
    manager.set_io(_NoSnapshotWrites())
    manager.remove_stray_snapshots(segment.base_offset for segment in segments)
    start = recovered[0].base_offset
    manager.truncate_and_reload(log_start_offset, start, now_ms)
    for segment, end in _segments_between(segments, manager.map_end_offset, start):
        from_offset = max(segment.base_offset, manager.map_end_offset, log_start_offset)
        _replay(manager, segment, from_offset, min(end, start))
    rebuilt = {id(segment) for segment in recovered}
    for segment in segments:
        if segment.base_offset >= start:
            from_offset = max(segment.base_offset, log_start_offset)
            _replay(manager, segment, from_offset, 2**63 - 1, id(segment) in rebuilt)
