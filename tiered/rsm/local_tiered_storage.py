"""The local-directory RemoteStorageManager: the embedded default tier.

Objects are files under one root directory, at the keys of `object_layout`. Every object
is written to a temporary name, fsynced and renamed, and the manifest goes last, after
the directory is synced: a crash leaves either a complete segment with its manifest or
objects without one, which a later copy of the same segment overwrites and a deletion
removes. Kafka's own test tier is ``LocalTieredStorage``; this one is meant for use.

Blocking, any thread: the RemoteLogManager's pools call it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator

from tiercel.storage.checkpoint_file import atomic_write
from tiercel.tiered.rsm.object_layout import (
    LOG_SUFFIX,
    MANIFEST_SUFFIX,
    encode_manifest,
    object_key,
)
from tiercel.tiered.rsm.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

__all__ = ["LocalTieredStorage"]

# Every object a segment may have, the manifest first: deletion removes it first.
_ALL_SUFFIXES = (MANIFEST_SUFFIX, LOG_SUFFIX, *(t.value for t in IndexType))


@contextlib.contextmanager
def _as_remote_errors(what: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as e:
        raise RemoteResourceNotFoundError(f"{what}: {e}") from e
    except OSError as e:
        raise RemoteStorageError(f"{what}: {e}") from e


class LocalTieredStorage:
    """A RemoteStorageManager over the directory ``root`` (``rsm.config.dir``)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)

    def _path(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        return os.path.join(self.root, object_key(metadata, suffix))

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        sources = {
            LOG_SUFFIX: data.log_segment,
            IndexType.OFFSET.value: data.offset_index,
            IndexType.TIMESTAMP.value: data.time_index,
            IndexType.TRANSACTION.value: data.transaction_index,
            IndexType.PRODUCER_SNAPSHOT.value: data.producer_snapshot_index,
        }
        copied = {suffix: source for suffix, source in sources.items() if source is not None}
        directory = os.path.dirname(self._path(metadata, LOG_SUFFIX))
        with _as_remote_errors(f"copying {metadata.remote_log_segment_id}"):
            os.makedirs(directory, exist_ok=True)
            for suffix, source in copied.items():
                _copy_durably(source, self._path(metadata, suffix))
            epochs = self._path(metadata, IndexType.LEADER_EPOCH.value)
            atomic_write(epochs, data.leader_epoch_index)
            objects = frozenset([*copied, IndexType.LEADER_EPOCH.value])
            # Last: the manifest's presence says every object above is in place.
            atomic_write(self._path(metadata, MANIFEST_SUFFIX), encode_manifest(metadata, objects))

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> bytes:
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise ValueError(f"bad range [{start_position}, {end_position}]")
        with (
            _as_remote_errors(f"reading {metadata.remote_log_segment_id}"),
            open(self._path(metadata, LOG_SUFFIX), "rb") as file,
        ):
            file.seek(start_position)
            return file.read(-1 if end_position is None else end_position - start_position + 1)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        with (
            _as_remote_errors(f"reading the {index_type.name} index of {metadata}"),
            open(self._path(metadata, index_type.value), "rb") as file,
        ):
            return file.read()

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        with _as_remote_errors(f"deleting {metadata.remote_log_segment_id}"):
            for suffix in _ALL_SUFFIXES:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self._path(metadata, suffix))
                if suffix == MANIFEST_SUFFIX:
                    # The manifest's removal durable before any object goes.
                    _sync_dir_if_present(os.path.dirname(self._path(metadata, suffix)))

    def close(self) -> None:
        """Nothing is held open between calls."""


def _copy_durably(source: str, destination: str) -> None:
    """``source`` copied to ``destination`` through a temporary name, fsynced."""
    temporary = f"{destination}.{uuid.uuid4().hex}.tmp"
    try:
        shutil.copyfile(source, temporary)
        fd = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, destination)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)


def _sync_dir_if_present(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
