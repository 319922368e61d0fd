"""The metadata log on disk (Kafka's ``KafkaMetadataLog``): ``__cluster_metadata-0`` as a
`UnifiedLog` in ``<metadata.log.dir>/__cluster_metadata-0`` (segments, indexes,
``leader-epoch-checkpoint``, ``partition.metadata`` with the metadata topic id), plus the
snapshots beside them.

As in Kafka the log has no time or size retention of its own: segments go only when a
snapshot lets the log start move past them (`delete_before_snapshot`), and
``metadata.max.retention.bytes/ms`` delete old snapshots, never the latest
(`maybe_clean`). Opening always recovers the segments (Kafka opens it with
lastShutdownClean false), drops partial and deleted snapshot files and those below the
log start, and empties the log when the latest snapshot is past its end (a follower that
crashed after downloading a snapshot, before truncating).

Event-loop only: appends and reads are page-cache I/O on the loop; fsyncs, the load and
file deletions run in the `Scheduler`'s executor.
"""

from __future__ import annotations

import itertools
import logging
import os
import uuid
from collections.abc import Callable
from typing import Final

from tiercel.config.log_config import LogConfig
from tiercel.config.logging_setup import log_event
from tiercel.protocol.record_batch import read_header
from tiercel.server.raft.errors import UnexpectedBaseOffsetError
from tiercel.server.raft.metadata_log_config import MetadataLogConfig
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch, ValidOffsetAndEpoch
from tiercel.server.raft.raw_snapshot import (
    FileRawSnapshotReader,
    FileRawSnapshotWriter,
    NotifyingRawSnapshotWriter,
    RawSnapshotReader,
    RawSnapshotWriter,
)
from tiercel.server.raft.records_snapshot import last_contained_log_timestamp
from tiercel.server.raft.replicated_log import (
    Isolation,
    LogAppendInfo,
    LogFetchInfo,
    validate_offset_and_epoch,
)
from tiercel.server.raft.snapshots import delete_if_exists, mark_for_delete, parse
from tiercel.server.raft.timer import Time
from tiercel.storage.checkpoint_file import PARTITION_METADATA_FILENAME, PartitionMetadataFile
from tiercel.storage.leader_epoch_cache import UNDEFINED_EPOCH_OFFSET
from tiercel.storage.log_loader import load_partition_dir
from tiercel.storage.log_manager import METADATA_TOPIC
from tiercel.storage.log_values import FetchIsolation, LogOffsetMetadata
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.unified_log import UnifiedLog

__all__ = ["METADATA_TOPIC_ID", "METADATA_TOPIC_PARTITION", "KafkaMetadataLog"]

_log: Final = logging.getLogger("tiercel.raft")

METADATA_TOPIC_PARTITION: Final = TopicPartition(METADATA_TOPIC, 0)
# Kafka's Uuid.METADATA_TOPIC_ID, "AAAAAAAAAAAAAAAAAAAAAQ".
METADATA_TOPIC_ID: Final = uuid.UUID(int=1)

Buffer = bytes | bytearray | memoryview


class KafkaMetadataLog:
    """Invariants: every snapshot kept is at or past the log start offset, and when the
    log start is above 0 a snapshot exists at or past it; the log is never truncated
    below its high watermark."""

    def __init__(
        self,
        log: UnifiedLog,
        time: Time,
        scheduler: Scheduler,
        snapshots: dict[OffsetAndEpoch, FileRawSnapshotReader | None],
        topic_id: uuid.UUID,
        config: MetadataLogConfig,
    ) -> None:
        self.log = log
        self._time = time
        self._scheduler = scheduler
        self._snapshots = snapshots
        self._topic_id = topic_id
        self._config = config

    @staticmethod
    async def open(
        data_dir: str,
        time: Time,
        scheduler: Scheduler,
        config: MetadataLogConfig,
        topic_partition: TopicPartition = METADATA_TOPIC_PARTITION,
        topic_id: uuid.UUID = METADATA_TOPIC_ID,
    ) -> KafkaMetadataLog:
        """Open (or create) the partition directory ``data_dir`` (Kafka's
        KafkaMetadataLog.apply)."""
        log_config = LogConfig(
            segment_bytes=config.log_segment_bytes,
            segment_ms=config.log_segment_millis,
            retention_ms=-1,
            retention_bytes=-1,
            max_message_bytes=config.max_batch_size_in_bytes,
            file_delete_delay_ms=config.file_delete_delay_ms,
        )
        await scheduler.run_blocking(os.makedirs, data_dir, 0o755, True)
        loaded = await scheduler.run_blocking(load_partition_dir, data_dir, log_config, 0, 0, False)
        if loaded.topic_id is None:
            metadata = PartitionMetadataFile(os.path.join(data_dir, PARTITION_METADATA_FILENAME))
            await scheduler.run_blocking(metadata.write, topic_id)
        log = UnifiedLog(
            loaded.directory,
            loaded.topic_partition,
            log_config,
            loaded.segments,
            loaded.log_start_offset,
            loaded.recovery_point,
            loaded.leader_epoch_cache,
            scheduler,
            topic_id,
            loaded.producer_state,
        )
        snapshots = await scheduler.run_blocking(_recover_snapshots, data_dir, log.log_start_offset)
        metadata_log = KafkaMetadataLog(log, time, scheduler, snapshots, topic_id, config)
        metadata_log.truncate_to_latest_snapshot()
        return metadata_log

    @property
    def topic_partition(self) -> TopicPartition:
        return self.log.topic_partition

    @property
    def topic_id(self) -> uuid.UUID:
        return self._topic_id

    @property
    def dir(self) -> str:
        return self.log.dir

    # -- append and read ---------------------------------------------------------------

    def append_as_leader(self, records: Buffer, epoch: int) -> LogAppendInfo:
        """The leader's batches, offsets assigned from the log end by its accumulator
        and stamped with ``epoch`` (Kafka appends them with AppendOrigin.RAFT_LEADER)."""
        if not records:
            raise ValueError("Attempt to append an empty record set")
        first = read_header(records).base_offset
        if first != self.log.log_end_offset:
            raise UnexpectedBaseOffsetError(
                f"Unexpected base offset {first} for a leader append at log end offset "
                f"{self.log.log_end_offset} in epoch {epoch}"
            )
        return self._append(records)

    def append_as_follower(self, records: Buffer) -> LogAppendInfo:
        if not records:
            raise ValueError("Attempt to append an empty record set")
        return self._append(records)

    def _append(self, records: Buffer) -> LogAppendInfo:
        info = self.log.append_as_follower(records)
        if info is None:
            raise ValueError("Append failed unexpectedly: no whole batch in the records")
        return LogAppendInfo(info.first_offset, info.last_offset)

    def read(self, start_offset: int, isolation: Isolation) -> LogFetchInfo:
        fetch_isolation = (
            FetchIsolation.HIGH_WATERMARK
            if isolation is Isolation.COMMITTED
            else FetchIsolation.LOG_END
        )
        info = self.log.read(
            start_offset, self._config.max_fetch_size_in_bytes, fetch_isolation, True
        )
        return LogFetchInfo(info.records, info.fetch_offset_metadata)

    # -- offsets and epochs --------------------------------------------------------------

    @property
    def last_fetched_epoch(self) -> int:
        latest = self.log.leader_epoch_cache.latest_epoch
        if latest is not None:
            return latest
        snapshot_id = self.latest_snapshot_id()
        if snapshot_id is None:
            return 0
        end = self.log.log_end_offset
        if snapshot_id.offset == self.start_offset == end:
            # The epoch of the snapshot when the log is empty.
            return snapshot_id.epoch
        raise RuntimeError(
            f"Log doesn't have a last fetch epoch and there is a snapshot ({snapshot_id}). "
            f"Expected the snapshot's end offset to match the log's end offset ({end}) "
            f"and the log start offset ({self.start_offset})"
        )

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        found_epoch, found_offset = self.log.end_offset_for_epoch(epoch)
        if found_offset == UNDEFINED_EPOCH_OFFSET:
            return OffsetAndEpoch(self.log.log_end_offset, self.last_fetched_epoch)
        earliest = self.earliest_snapshot_id()
        if earliest is not None and found_offset == earliest.offset and found_epoch == epoch:
            # The epoch is older than the log's first: the snapshot at the log start is
            # where this log's history begins.
            return earliest
        return OffsetAndEpoch(found_offset, found_epoch)

    @property
    def end_offset(self) -> LogOffsetMetadata:
        return self.log.log_end_offset_metadata

    @property
    def start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> LogOffsetMetadata:
        return self.log.high_watermark_metadata

    def update_high_watermark(self, offset_metadata: LogOffsetMetadata) -> None:
        self.log.update_high_watermark(offset_metadata.message_offset)

    def initialize_leader_epoch(self, epoch: int) -> None:
        self.log.maybe_assign_epoch_start_offset(epoch, self.log.log_end_offset)

    # -- truncation --------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        high_watermark = self.log.high_watermark
        if offset < high_watermark:
            raise ValueError(
                f"Attempt to truncate to offset {offset}, which is below the current high "
                f"watermark {high_watermark}"
            )
        self.log.truncate_to(offset)

    def truncate_to_latest_snapshot(self) -> bool:
        latest_epoch = self.log.leader_epoch_cache.latest_epoch or 0
        snapshot_id = self.latest_snapshot_id()
        if snapshot_id is None or not (
            snapshot_id.epoch > latest_epoch
            or (snapshot_id.epoch == latest_epoch and snapshot_id.offset > self.log.log_end_offset)
        ):
            return False
        self.log.truncate_fully_and_start_at(snapshot_id.offset)
        self._remove_snapshots(self._forget_snapshots_before(snapshot_id), "full truncation")
        return True

    async def flush(self, force_flush_active_segment: bool) -> None:
        """fsync everything appended (Kafka's flush(false) flushes to the log end offset
        too; the flag only matters to the segment being closed)."""
        await self.log.flush()

    # -- snapshots -----------------------------------------------------------------------

    def create_new_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        if snapshot_id.offset < self.start_offset:
            log_event(
                _log,
                logging.INFO,
                "snapshot_below_log_start",
                snapshot_id=str(snapshot_id),
                log_start_offset=self.start_offset,
            )
            return None
        high_watermark = self.log.high_watermark
        if snapshot_id.offset > high_watermark:
            raise ValueError(
                f"Cannot create a snapshot with an id ({snapshot_id}) greater than the "
                f"high-watermark ({high_watermark})"
            )
        valid = validate_offset_and_epoch(self, snapshot_id.offset, snapshot_id.epoch)
        if valid.kind is not ValidOffsetAndEpoch.Kind.VALID:
            raise ValueError(
                f"Snapshot id ({snapshot_id}) is not valid according to the log: {valid}"
            )
        # Followers fetch from the snapshot's end offset on: it must start a batch, or the
        # batch a follower gets back would start below its log end (Kafka's KAFKA-14619).
        records = self.read(snapshot_id.offset, Isolation.COMMITTED).records
        if records and read_header(records).base_offset != snapshot_id.offset:
            raise ValueError(
                f"Cannot create snapshot at offset ({snapshot_id.offset}) because it is not "
                f"batch aligned. The batch containing the requested offset has a base offset "
                f"of ({read_header(records).base_offset})"
            )
        return self.create_new_snapshot_unchecked(snapshot_id)

    def create_new_snapshot_unchecked(
        self, snapshot_id: OffsetAndEpoch
    ) -> RawSnapshotWriter | None:
        if snapshot_id in self._snapshots:
            return None
        writer = FileRawSnapshotWriter.create(self.dir, snapshot_id, self._scheduler)
        return NotifyingRawSnapshotWriter(writer, self.on_snapshot_frozen)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotReader | None:
        if snapshot_id not in self._snapshots:
            return None
        reader = self._snapshots[snapshot_id]
        if reader is None:
            try:
                reader = FileRawSnapshotReader.open(self.dir, snapshot_id)
            except FileNotFoundError:
                log_event(
                    _log, logging.WARNING, "snapshot_file_missing", snapshot_id=str(snapshot_id)
                )
                del self._snapshots[snapshot_id]
                return None
            self._snapshots[snapshot_id] = reader
        return reader

    def latest_snapshot(self) -> RawSnapshotReader | None:
        snapshot_id = self.latest_snapshot_id()
        return None if snapshot_id is None else self.read_snapshot(snapshot_id)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return max(self._snapshots, default=None)

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return min(self._snapshots, default=None)

    def on_snapshot_frozen(self, snapshot_id: OffsetAndEpoch) -> None:
        self._snapshots[snapshot_id] = None

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        return self._delete_before_snapshot(snapshot_id, "unknown reason")

    def _delete_before_snapshot(self, snapshot_id: OffsetAndEpoch, reason: str) -> bool:
        latest = self.latest_snapshot_id()
        if (
            latest is None
            or snapshot_id not in self._snapshots
            or not self.start_offset < snapshot_id.offset <= latest.offset
            or not self.log.maybe_increment_log_start_offset(snapshot_id.offset)
        ):
            return False
        deleted_segments = self.log.delete_old_segments()
        forgotten = self._forget_snapshots_before(snapshot_id)
        self._remove_snapshots(forgotten, reason)
        return deleted_segments != 0 or bool(forgotten)

    def maybe_clean(self) -> bool:
        """Delete the oldest snapshots (and the segments before the next one) while the
        log and snapshots exceed metadata.max.retention.bytes, or the snapshots are older
        than metadata.max.retention.ms; the latest snapshot always stays (Kafka's
        maybeClean)."""
        cleaned_by_size = self._clean_snapshots_retention_size()
        cleaned_by_time = self._clean_snapshots_retention_ms()
        return cleaned_by_size or cleaned_by_time

    def _clean_snapshots(self, should_delete: Callable[[OffsetAndEpoch], str | None]) -> bool:
        cleaned = False
        ids = sorted(self._snapshots)
        for snapshot_id, next_id in itertools.pairwise(ids):
            reason = should_delete(snapshot_id)
            if reason is None or not self._delete_before_snapshot(next_id, reason):
                return cleaned
            cleaned = True
        return cleaned

    def _clean_snapshots_retention_ms(self) -> bool:
        retention = self._config.retention_millis
        if retention < 0:
            return False

        def expired(snapshot_id: OffsetAndEpoch) -> str | None:
            reader = self.read_snapshot(snapshot_id)
            if reader is None:
                return None
            timestamp = last_contained_log_timestamp(reader)
            now = self._time.milliseconds()
            if now - timestamp <= retention:
                return None
            return (
                f"its timestamp ({timestamp}) is now ({now}) older than the retention ({retention})"
            )

        return self._clean_snapshots(expired)

    def _clean_snapshots_retention_size(self) -> bool:
        retention = self._config.retention_max_bytes
        if retention < 0:
            return False
        sizes = {}
        for snapshot_id in list(self._snapshots):
            reader = self.read_snapshot(snapshot_id)
            if reader is not None:
                sizes[snapshot_id] = reader.size_in_bytes
        total = sum(sizes.values())

        def too_large(snapshot_id: OffsetAndEpoch) -> str | None:
            nonlocal total
            size = sizes.get(snapshot_id)
            log_size = self.log.size
            if size is None or log_size + total <= retention:
                return None
            before = total
            total -= size
            return (
                f"the log size ({log_size}) and snapshots size ({before}) is greater than "
                f"{retention}"
            )

        return self._clean_snapshots(too_large)

    def _forget_snapshots_before(
        self, log_start_snapshot_id: OffsetAndEpoch
    ) -> dict[OffsetAndEpoch, FileRawSnapshotReader | None]:
        expired = {s: r for s, r in self._snapshots.items() if s < log_start_snapshot_id}
        for snapshot_id in expired:
            del self._snapshots[snapshot_id]
        return expired

    def _remove_snapshots(
        self, expired: dict[OffsetAndEpoch, FileRawSnapshotReader | None], reason: str
    ) -> None:
        """Rename them ``.checkpoint.deleted`` now, delete the files after
        ``file.delete.delay.ms`` in the executor (Kafka's removeSnapshots)."""
        if not expired:
            return
        for snapshot_id in expired:
            log_event(
                _log,
                logging.INFO,
                "snapshot_marked_for_deletion",
                snapshot_id=str(snapshot_id),
                reason=reason,
            )
            mark_for_delete(self.dir, snapshot_id)
        directory = self.dir
        scheduler = self._scheduler

        def delete_files() -> None:
            for snapshot_id, reader in expired.items():
                if reader is not None:
                    reader.close()
                delete_if_exists(directory, snapshot_id)

        def later() -> None:
            scheduler.run_blocking_in_background(delete_files, name="delete snapshot files")

        scheduler.call_later(self._config.file_delete_delay_ms / 1000, later)

    async def close(self) -> None:
        await self.log.close()
        for reader in self._snapshots.values():
            if reader is not None:
                reader.close()
        self._snapshots.clear()


def _recover_snapshots(
    directory: str, log_start_offset: int
) -> dict[OffsetAndEpoch, FileRawSnapshotReader | None]:
    """*Blocking.* The frozen snapshots at or past the log start; the others, partial and
    deleted files go (Kafka's recoverSnapshots)."""
    retained: dict[OffsetAndEpoch, FileRawSnapshotReader | None] = {}
    doomed: list[str] = []
    for name in sorted(os.listdir(directory)):
        snapshot = parse(os.path.join(directory, name))
        if snapshot is None:
            continue
        if snapshot.partial or snapshot.deleted or snapshot.snapshot_id.offset < log_start_offset:
            doomed.append(snapshot.path)
        else:
            retained[snapshot.snapshot_id] = None
    if log_start_offset > 0 and not any(s.offset >= log_start_offset for s in retained):
        latest = max(retained, default=None)
        raise RuntimeError(
            "Inconsistent snapshot state: there must be a snapshot at an offset larger then "
            f"the current log start offset {log_start_offset}, but the latest snapshot is "
            f"{latest}"
        )
    for path in doomed:
        os.remove(path)
        log_event(_log, logging.INFO, "unneeded_snapshot_deleted", path=path)
    return retained
