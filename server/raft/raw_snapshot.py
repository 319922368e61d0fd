"""Snapshot files as bytes (Kafka's ``RawSnapshotWriter``/``RawSnapshotReader`` and their
file implementations): what FetchSnapshot moves in chunks, and what the records writer
and reader sit on.

Writing goes to a ``.checkpoint.part`` file with page-cache writes on the loop, as
segment appends do; `freeze` fsyncs it, makes it read-only and renames it to
``.checkpoint`` in the executor (Kafka's FileRawSnapshotWriter.freeze), so a crash leaves
either no snapshot or a whole one. Reads are preads, as segment reads are.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from typing import Protocol

from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch
from tiercel.server.raft.snapshots import (
    PARTIAL_SUFFIX,
    filename_from_snapshot_id,
    snapshot_path,
)
from tiercel.storage.local_log import sync_dir
from tiercel.storage.scheduler import Scheduler

__all__ = [
    "FileRawSnapshotReader",
    "FileRawSnapshotWriter",
    "NotifyingRawSnapshotWriter",
    "RawSnapshotReader",
    "RawSnapshotWriter",
]

Buffer = bytes | bytearray | memoryview


class RawSnapshotWriter(Protocol):
    @property
    def snapshot_id(self) -> OffsetAndEpoch: ...
    @property
    def size_in_bytes(self) -> int: ...
    @property
    def is_frozen(self) -> bool: ...
    def append(self, data: Buffer) -> None: ...
    async def freeze(self) -> None: ...
    def close(self) -> None: ...


class RawSnapshotReader(Protocol):
    @property
    def snapshot_id(self) -> OffsetAndEpoch: ...
    @property
    def size_in_bytes(self) -> int: ...
    def slice(self, position: int, size: int) -> bytes: ...
    def close(self) -> None: ...


class FileRawSnapshotWriter:
    """Event-loop only. Invariant: once frozen, no more appends."""

    def __init__(self, temp_path: str, snapshot_id: OffsetAndEpoch, scheduler: Scheduler) -> None:
        self._temp_path = temp_path
        self._snapshot_id = snapshot_id
        self._scheduler = scheduler
        self._fd: int | None = os.open(temp_path, os.O_WRONLY | os.O_APPEND)
        self._size = 0
        self._frozen = False

    @staticmethod
    def create(
        log_dir: str, snapshot_id: OffsetAndEpoch, scheduler: Scheduler
    ) -> FileRawSnapshotWriter:
        """A writer on a new ``<id>-<random>.checkpoint.part`` (Kafka's createTempFile)."""
        prefix = filename_from_snapshot_id(snapshot_id) + "-"
        fd, path = tempfile.mkstemp(suffix=PARTIAL_SUFFIX, prefix=prefix, dir=log_dir)
        os.close(fd)
        return FileRawSnapshotWriter(path, snapshot_id, scheduler)

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot_id

    @property
    def size_in_bytes(self) -> int:
        return self._size

    @property
    def is_frozen(self) -> bool:
        return self._frozen

    def append(self, data: Buffer) -> None:
        self._check_not_frozen("Append")
        assert self._fd is not None, "appending to a closed snapshot writer"
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._size += len(data)

    async def freeze(self) -> None:
        self._check_not_frozen("Freeze")
        fd, self._fd = self._fd, None
        assert fd is not None, "freezing a closed snapshot writer"
        self._frozen = True
        destination = snapshot_path(os.path.dirname(self._temp_path), self._snapshot_id)
        await self._scheduler.run_blocking(_freeze, fd, self._temp_path, destination)

    def close(self) -> None:
        """Drop an unfrozen snapshot's file; nothing once frozen."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self._frozen:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._temp_path)

    def _check_not_frozen(self, operation: str) -> None:
        if self._frozen:
            raise RuntimeError(
                f"{operation} is not supported. Snapshot is already frozen: "
                f"id = {self._snapshot_id}; temp path = {self._temp_path}"
            )


def _freeze(fd: int, temp_path: str, destination: str) -> None:
    """*Blocking.* The data is on disk before the rename makes it a snapshot."""
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(temp_path, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    os.replace(temp_path, destination)
    sync_dir(os.path.dirname(destination))


class NotifyingRawSnapshotWriter:
    """Tells its log once the snapshot is frozen (Kafka's NotifyingRawSnapshotWriter)."""

    def __init__(
        self, writer: RawSnapshotWriter, on_frozen: Callable[[OffsetAndEpoch], None]
    ) -> None:
        self._writer = writer
        self._on_frozen = on_frozen

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._writer.snapshot_id

    @property
    def size_in_bytes(self) -> int:
        return self._writer.size_in_bytes

    @property
    def is_frozen(self) -> bool:
        return self._writer.is_frozen

    def append(self, data: Buffer) -> None:
        self._writer.append(data)

    async def freeze(self) -> None:
        await self._writer.freeze()
        self._on_frozen(self._writer.snapshot_id)

    def close(self) -> None:
        self._writer.close()


class FileRawSnapshotReader:
    """A frozen snapshot file, open for preads. Event-loop only (page-cache reads)."""

    def __init__(self, path: str, snapshot_id: OffsetAndEpoch) -> None:
        self._snapshot_id = snapshot_id
        self._fd = os.open(path, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size

    @staticmethod
    def open(log_dir: str, snapshot_id: OffsetAndEpoch) -> FileRawSnapshotReader:
        """FileNotFoundError when the snapshot is not there."""
        return FileRawSnapshotReader(snapshot_path(log_dir, snapshot_id), snapshot_id)

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self._snapshot_id

    @property
    def size_in_bytes(self) -> int:
        return self._size

    def slice(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position``: a FetchSnapshot chunk, not aligned on
        batches (Kafka's UnalignedRecords)."""
        return os.pread(self._fd, max(0, min(size, self._size - position)), position)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
