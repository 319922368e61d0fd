"""Snapshots as records (Kafka's ``SnapshotWriter``/``SnapshotReader`` and their
``RecordsSnapshotWriter``/``RecordsSnapshotReader``): what the state machine writes when
the Raft client hands it a writer, and what a listener reads on load.

Layout (KIP-630): a control batch with the SnapshotHeaderRecord (its
LastContainedLogTimestamp), the data batches, a control batch with the
SnapshotFooterRecord; offsets from 0, every batch stamped with the snapshot id's epoch.
With kraft.version 1 (KIP-853) the header's batch also holds a KRaftVersionRecord and
the VotersRecord of the voter set at the snapshot's offset, so the voters outlive the
log prefix the snapshot replaces; with kraft.version 0 the header is alone.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any, Final, Generic, Protocol, TypeVar

from tiercel.protocol.errors import CorruptRecordError
from tiercel.protocol.record_batch import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, read_header
from tiercel.server.raft.batch import Batch
from tiercel.server.raft.batch_accumulator import BatchAccumulator
from tiercel.server.raft.control_record import (
    ControlRecordType,
    kraft_version_record,
    snapshot_header_record,
)
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.raw_snapshot import RawSnapshotReader, RawSnapshotWriter
from tiercel.server.raft.record_serde import IdentitySerde, RecordSerde
from tiercel.server.raft.records_iterator import decode_batch
from tiercel.server.raft.timer import Time
from tiercel.server.raft.voter_set import VoterSet

__all__ = [
    "RecordsSnapshotReader",
    "RecordsSnapshotWriter",
    "SnapshotReader",
    "SnapshotWriter",
    "last_contained_log_timestamp",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)
_SIZE_PREFIX: Final = struct.Struct(">qi")
# A snapshot's batches never linger: they go when full or at freeze.
_NO_LINGER: Final = 2**31 - 1


class SnapshotWriter(Protocol[T_contra]):
    """What the state machine writes a snapshot through (Kafka's SnapshotWriter)."""

    @property
    def snapshot_id(self) -> OffsetAndEpoch: ...
    @property
    def is_frozen(self) -> bool: ...
    def append(self, records: Sequence[T_contra]) -> None: ...
    async def freeze(self) -> int: ...
    def close(self) -> None: ...


class SnapshotReader(Protocol[T_co]):
    """What a listener loads a snapshot from (Kafka's SnapshotReader): its batches, in
    order; the listener closes it."""

    @property
    def snapshot_id(self) -> OffsetAndEpoch: ...
    @property
    def last_contained_log_timestamp(self) -> int: ...
    def __iter__(self) -> Iterator[Batch[T_co]]: ...
    def close(self) -> None: ...


class RecordsSnapshotWriter(Generic[T]):
    """Event-loop only. Invariant: the header batch is written first, the footer last,
    and nothing after `freeze`."""

    def __init__(
        self,
        snapshot: RawSnapshotWriter,
        last_contained_log_timestamp: int,
        max_batch_size: int,
        time: Time,
        serde: RecordSerde[T],
        kraft_version: int = 0,
        voter_set: VoterSet | None = None,
    ) -> None:
        if snapshot.size_in_bytes != 0:
            raise RuntimeError(
                f"Initializing writer with a non-empty snapshot: {snapshot.snapshot_id}"
            )
        self._snapshot = snapshot
        self._time = time
        self._accumulator = BatchAccumulator(
            snapshot.snapshot_id.epoch, 0, _NO_LINGER, max_batch_size, 10, time, serde
        )
        # Kafka's RecordsSnapshotWriter.Builder.build.
        messages: list[Any] = [snapshot_header_record(last_contained_log_timestamp)]
        if kraft_version >= 1:
            messages.append(kraft_version_record(kraft_version))
            if voter_set is not None:
                messages.append(voter_set.to_voters_record())
        self._accumulator.append_control_messages(messages, time.milliseconds())

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot.snapshot_id

    @property
    def last_contained_log_offset(self) -> int:
        return self._snapshot.snapshot_id.offset - 1

    @property
    def is_frozen(self) -> bool:
        return self._snapshot.is_frozen

    def append(self, records: Sequence[T]) -> None:
        if self._snapshot.is_frozen:
            raise RuntimeError(
                f"Append not supported. Snapshot is already frozen: id = '{self.snapshot_id}'."
            )
        self._accumulator.append(self.snapshot_id.epoch, records, delay_drain=False)
        # A batch that filled up goes to the file now (Kafka's RecordsSnapshotWriter.append).
        if self._accumulator.needs_drain(self._time.milliseconds()):
            self._write_batches()

    async def freeze(self) -> int:
        """Write the footer, make the snapshot durable and visible; its size in bytes."""
        self._accumulator.append_snapshot_footer_record(self._time.milliseconds())
        self._write_batches()
        await self._snapshot.freeze()
        self._accumulator.close()
        return self._snapshot.size_in_bytes

    def close(self) -> None:
        self._snapshot.close()
        self._accumulator.close()

    def _write_batches(self) -> None:
        for batch in self._accumulator.drain():
            self._snapshot.append(batch.data)


class RecordsSnapshotReader(Generic[T]):
    """Reads a snapshot batch by batch with preads. Event-loop only."""

    def __init__(self, snapshot: RawSnapshotReader, serde: RecordSerde[T]) -> None:
        self._snapshot = snapshot
        self._serde = serde
        self._timestamp: int | None = None

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot.snapshot_id

    @property
    def last_contained_log_offset(self) -> int:
        return self._snapshot.snapshot_id.offset - 1

    @property
    def last_contained_log_timestamp(self) -> int:
        if self._timestamp is None:
            next(iter(self), None)
        if self._timestamp is None:
            raise CorruptRecordError(f"Snapshot {self.snapshot_id} has no header")
        return self._timestamp

    def __iter__(self) -> Iterator[Batch[T]]:
        position = 0
        size = self._snapshot.size_in_bytes
        while position < size:
            prefix = self._snapshot.slice(position, LOG_OVERHEAD)
            if len(prefix) < LOG_OVERHEAD:
                raise CorruptRecordError(f"Snapshot {self.snapshot_id} ends mid-batch")
            _, length = _SIZE_PREFIX.unpack(prefix)
            data = memoryview(self._snapshot.slice(position, length + LOG_OVERHEAD))
            if len(data) < RECORD_BATCH_OVERHEAD or len(data) != length + LOG_OVERHEAD:
                raise CorruptRecordError(f"Snapshot {self.snapshot_id} ends mid-batch")
            batch = decode_batch(data, 0, read_header(data), self._serde)
            if self._timestamp is None:
                self._timestamp = _header_timestamp(batch, self.snapshot_id)
            yield batch
            position += len(data)

    def close(self) -> None:
        """The raw reader is the log's (it caches it); nothing to release here."""


def _header_timestamp(batch: Batch[T], snapshot_id: OffsetAndEpoch) -> int:
    """The first batch must hold the SnapshotHeaderRecord (Kafka's
    RecordsSnapshotReader.nextBatch)."""
    if not batch.control_records:
        raise CorruptRecordError(
            f"Snapshot {snapshot_id}: first batch is not a control batch with at least one record"
        )
    first = batch.control_records[0]
    if first.type is not ControlRecordType.SNAPSHOT_HEADER:
        raise CorruptRecordError(
            f"Snapshot {snapshot_id}: first control record is not a snapshot header ({first.type})"
        )
    return int(first.message.last_contained_log_timestamp)


def last_contained_log_timestamp(snapshot: RawSnapshotReader) -> int:
    """The header's LastContainedLogTimestamp (Kafka's Snapshots.lastContainedLogTimestamp),
    which ``metadata.max.retention.ms`` is measured against."""
    return RecordsSnapshotReader(snapshot, IdentitySerde()).last_contained_log_timestamp
