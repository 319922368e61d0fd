"""What the quorum controller needs of the Raft client (the part of Kafka's
``RaftClient`` it calls) and what it is handed back (``BatchReader``), as Protocols: the
real KafkaRaftClient plugs in unchanged, and unit tests use an in-memory one."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar

from tiercel.protocol.metadata.metadata_record_serde import ApiMessageAndVersion
from tiercel.server.raft.batch import Batch
from tiercel.server.raft.leader_and_epoch import LeaderAndEpoch
from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.records_snapshot import SnapshotReader, SnapshotWriter

__all__ = ["BatchReader", "RaftClient", "RaftListener"]

T_co = TypeVar("T_co", covariant=True)


class BatchReader(Protocol[T_co]):
    """Committed batches, in offset order (Kafka's ``BatchReader``); closed by the
    listener once it has consumed them."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    def __iter__(self) -> Iterator[Batch[T_co]]: ...
    def close(self) -> None: ...


class RaftListener(Protocol):
    """Kafka's ``RaftClient.Listener``, for metadata records."""

    def handle_commit(self, reader: BatchReader[ApiMessageAndVersion]) -> None: ...
    def handle_load_snapshot(self, reader: SnapshotReader[ApiMessageAndVersion]) -> None: ...
    def handle_leader_change(self, leader: LeaderAndEpoch) -> None: ...
    def begin_shutdown(self) -> None: ...


class RaftClient(Protocol):
    """Event-loop only, as the client is."""

    def register(self, listener: RaftListener) -> None: ...
    @property
    def leader_and_epoch(self) -> LeaderAndEpoch: ...
    @property
    def log_end_offset(self) -> int: ...
    def schedule_atomic_append(
        self, epoch: int, records: Sequence[ApiMessageAndVersion]
    ) -> int: ...
    def resign(self, epoch: int) -> None: ...
    def create_snapshot(
        self, snapshot_id: OffsetAndEpoch, last_contained_log_time: int
    ) -> SnapshotWriter[ApiMessageAndVersion] | None: ...
