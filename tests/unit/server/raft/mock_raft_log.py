"""An in-memory ReplicatedLog for the Raft unit tests and the simulation (Kafka's MockLog,
MockRawSnapshotWriter/Reader): whole batches in a list, snapshots as bytes, and unflushed
data that `reopen` loses, as a crash would. The contract tests hold it to what
KafkaMetadataLog does."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from tiercel.protocol.record_batch import iter_batches, read_header
from tiercel.server.raft.errors import UnexpectedBaseOffsetError
from tiercel.server.raft.kafka_metadata_log import METADATA_TOPIC_ID, METADATA_TOPIC_PARTITION
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch, ValidOffsetAndEpoch
from tiercel.server.raft.raw_snapshot import RawSnapshotReader, RawSnapshotWriter
from tiercel.server.raft.replicated_log import (
    Isolation,
    LogAppendInfo,
    LogFetchInfo,
    validate_offset_and_epoch,
)
from tiercel.storage.log_values import LogOffsetMetadata
from tiercel.storage.topic_partition import TopicPartition

Buffer = bytes | bytearray | memoryview
MAX_FETCH_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LogBatch:
    base_offset: int
    last_offset: int
    epoch: int
    data: bytes


class MockRawSnapshotReader:
    def __init__(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.snapshot_id = snapshot_id
        self.data = data

    @property
    def size_in_bytes(self) -> int:
        return len(self.data)

    def slice(self, position: int, size: int) -> bytes:
        return self.data[position : position + size]

    def close(self) -> None:
        pass


class MockRawSnapshotWriter:
    def __init__(
        self, snapshot_id: OffsetAndEpoch, on_frozen: Callable[[OffsetAndEpoch, bytes], None]
    ) -> None:
        self.snapshot_id = snapshot_id
        self._on_frozen = on_frozen
        self._data = bytearray()
        self.is_frozen = False

    @property
    def size_in_bytes(self) -> int:
        return len(self._data)

    def append(self, data: Buffer) -> None:
        if self.is_frozen:
            raise RuntimeError("Append is not supported. Snapshot is already frozen")
        self._data += data

    async def freeze(self) -> None:
        if self.is_frozen:
            raise RuntimeError("Freeze is not supported. Snapshot is already frozen")
        self.is_frozen = True
        self._on_frozen(self.snapshot_id, bytes(self._data))

    def close(self) -> None:
        pass


class MockLog:
    def __init__(
        self,
        topic_partition: TopicPartition = METADATA_TOPIC_PARTITION,
        topic_id: uuid.UUID = METADATA_TOPIC_ID,
    ) -> None:
        self.topic_partition = topic_partition
        self.topic_id = topic_id
        self.batches: list[LogBatch] = []
        self.epoch_start_offsets: list[tuple[int, int]] = []
        self.snapshots: dict[OffsetAndEpoch, MockRawSnapshotReader] = {}
        self._start_offset = 0
        self._high_watermark = 0
        self.first_unflushed_offset = 0
        self.flushes = 0

    # -- offsets -------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def end_offset(self) -> LogOffsetMetadata:
        end = self.batches[-1].last_offset + 1 if self.batches else self._start_offset
        return LogOffsetMetadata(end)

    @property
    def high_watermark(self) -> LogOffsetMetadata:
        return LogOffsetMetadata(self._high_watermark)

    def update_high_watermark(self, offset_metadata: LogOffsetMetadata) -> None:
        offset = offset_metadata.message_offset
        end = self.end_offset.message_offset
        self._high_watermark = min(max(offset, self._start_offset), end)

    @property
    def last_fetched_epoch(self) -> int:
        if self.epoch_start_offsets:
            return self.epoch_start_offsets[-1][0]
        latest = self.latest_snapshot_id()
        return 0 if latest is None else latest.epoch

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        earliest = self.earliest_snapshot_id()
        lower_bound = 0 if earliest is None else earliest.epoch
        for entry_epoch, start in self.epoch_start_offsets:
            if entry_epoch > epoch:
                return OffsetAndEpoch(start, lower_bound)
            lower_bound = entry_epoch
        return OffsetAndEpoch(self.end_offset.message_offset, self.last_fetched_epoch)

    def initialize_leader_epoch(self, epoch: int) -> None:
        self._assign_epoch(epoch, self.end_offset.message_offset)

    def _assign_epoch(self, epoch: int, start: int) -> None:
        if not self.epoch_start_offsets or epoch > self.epoch_start_offsets[-1][0]:
            self.epoch_start_offsets.append((epoch, start))

    # -- append and read -----------------------------------------------------------------

    def append_as_leader(self, records: Buffer, epoch: int) -> LogAppendInfo:
        first = read_header(records).base_offset
        end = self.end_offset.message_offset
        if first != end:
            raise UnexpectedBaseOffsetError(f"base offset {first} != log end {end}")
        return self.append_as_follower(records)

    def append_as_follower(self, records: Buffer) -> LogAppendInfo:
        if not records:
            raise ValueError("Attempt to append an empty record set")
        view = memoryview(records)
        first = last = -1
        for position, header in iter_batches(view):
            if header.base_offset < self.end_offset.message_offset:
                raise RuntimeError(
                    f"base offset {header.base_offset} below log end {self.end_offset}"
                )
            if header.partition_leader_epoch >= 0:
                self._assign_epoch(header.partition_leader_epoch, header.base_offset)
            data = bytes(view[position : position + header.size_in_bytes])
            self.batches.append(
                LogBatch(
                    header.base_offset, header.last_offset, header.partition_leader_epoch, data
                )
            )
            first = header.base_offset if first < 0 else first
            last = header.last_offset
        return LogAppendInfo(first, last)

    def read(self, start_offset: int, isolation: Isolation) -> LogFetchInfo:
        end = self.end_offset.message_offset
        if start_offset < self._start_offset or start_offset > end:
            raise ValueError(f"offset {start_offset} out of range")
        limit = self._high_watermark if isolation is Isolation.COMMITTED else end
        out = bytearray()
        for batch in self.batches:
            if batch.last_offset < start_offset or batch.base_offset >= limit:
                continue
            if out and len(out) + len(batch.data) > MAX_FETCH_BYTES:
                break
            out += batch.data
        return LogFetchInfo(bytes(out), LogOffsetMetadata(start_offset))

    async def flush(self, force_flush_active_segment: bool) -> None:
        self.first_unflushed_offset = self.end_offset.message_offset
        self.flushes += 1

    def reopen(self) -> None:
        """What survives a crash: the flushed prefix (Kafka's MockLog.reopen)."""
        cut = self.first_unflushed_offset
        self.batches = [b for b in self.batches if b.base_offset < cut]
        self.epoch_start_offsets = [e for e in self.epoch_start_offsets if e[1] < cut]
        self._high_watermark = self._start_offset

    # -- truncation ----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        if offset < self._high_watermark:
            raise ValueError(f"Illegal attempt to truncate to offset {offset} below the HW")
        self.batches = [b for b in self.batches if b.last_offset < offset]
        self.epoch_start_offsets = [e for e in self.epoch_start_offsets if e[1] < offset]
        self.first_unflushed_offset = min(
            self.first_unflushed_offset, self.end_offset.message_offset
        )

    def truncate_to_latest_snapshot(self) -> bool:
        latest = self.latest_snapshot_id()
        latest_epoch = self.epoch_start_offsets[-1][0] if self.epoch_start_offsets else 0
        if latest is None or not latest > OffsetAndEpoch(
            self.end_offset.message_offset, latest_epoch
        ):
            return False
        self.batches = []
        self.epoch_start_offsets = []
        self._start_offset = latest.offset
        self._high_watermark = latest.offset
        self.first_unflushed_offset = latest.offset
        self.snapshots = {s: r for s, r in self.snapshots.items() if s >= latest}
        return True

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        latest = self.latest_snapshot_id()
        if (
            latest is None
            or snapshot_id not in self.snapshots
            or not self._start_offset < snapshot_id.offset <= latest.offset
            or snapshot_id.offset > self._high_watermark
        ):
            return False
        self._start_offset = snapshot_id.offset
        self.batches = [b for b in self.batches if b.last_offset >= snapshot_id.offset]
        self.epoch_start_offsets = [
            e for e in self.epoch_start_offsets if e[1] >= snapshot_id.offset
        ]
        self.snapshots = {s: r for s, r in self.snapshots.items() if s >= snapshot_id}
        return True

    def maybe_clean(self) -> bool:
        return False

    # -- snapshots -----------------------------------------------------------------------

    def create_new_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        if snapshot_id.offset < self._start_offset:
            return None
        if snapshot_id.offset > self._high_watermark:
            raise ValueError(f"Cannot create a snapshot {snapshot_id} above the high-watermark")
        valid = validate_offset_and_epoch(self, snapshot_id.offset, snapshot_id.epoch)
        if valid.kind is not ValidOffsetAndEpoch.Kind.VALID:
            raise ValueError(f"Snapshot id ({snapshot_id}) is not valid according to the log")
        records = self.read(snapshot_id.offset, Isolation.COMMITTED).records
        if records and read_header(records).base_offset != snapshot_id.offset:
            raise ValueError(f"Cannot create snapshot at {snapshot_id}: not batch aligned")
        return self.create_new_snapshot_unchecked(snapshot_id)

    def create_new_snapshot_unchecked(
        self, snapshot_id: OffsetAndEpoch
    ) -> RawSnapshotWriter | None:
        if snapshot_id in self.snapshots:
            return None
        return MockRawSnapshotWriter(snapshot_id, self._frozen)

    def _frozen(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.snapshots[snapshot_id] = MockRawSnapshotReader(snapshot_id, data)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotReader | None:
        return self.snapshots.get(snapshot_id)

    def latest_snapshot(self) -> RawSnapshotReader | None:
        latest = self.latest_snapshot_id()
        return None if latest is None else self.snapshots[latest]

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return max(self.snapshots, default=None)

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return min(self.snapshots, default=None)

    def on_snapshot_frozen(self, snapshot_id: OffsetAndEpoch) -> None:
        pass

    async def close(self) -> None:
        await self.flush(True)
