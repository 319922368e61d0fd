"""The local-directory RemoteStorageManager: the embedded default tier.

Objects are files under one root directory, at the keys of `object_layout`. Every object
is written to a temporary name (ending ``.tmp``, never listed) and fsynced before it is
renamed to its key; a segment's data objects are renamed together and their directory
synced once, before the manifest is written the same way, so the manifest, written last,
is durable only after every other object is: a crash leaves either a complete segment
with its manifest or objects without one, which a later copy of the same segment
overwrites and a deletion removes. Kafka's own test tier is ``LocalTieredStorage``; this
one is meant for use.

Blocking, any thread: the RemoteLogManager's pools call it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import mmap
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Final

from tiercel.tiered.rsm.object_store_rsm import ObjectStoreRemoteStorageManager
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

__all__ = ["LocalDirectoryStore", "LocalTieredStorage"]

_TEMPORARY: Final = ".tmp"
# O_DIRECT copies: bytes per write (a multiple of the alignment), and the alignment of
# their offsets and lengths (the logical block size of every common disk).
_DIRECT_CHUNK: Final = 8 * 1024 * 1024
_DIRECT_ALIGNMENT: Final = 4096


@contextlib.contextmanager
def _as_remote_errors(what: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as e:
        raise RemoteResourceNotFoundError(f"{what}: {e}") from e
    except OSError as e:
        raise RemoteStorageError(f"{what}: {e}") from e


class LocalDirectoryStore:
    """An `ObjectStore` of files under ``root``: a key is a path relative to it.
    Thread-safe: every write goes through a temporary file of its own."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, key)

    def put_file(self, key: str, path: str) -> None:
        self.put_all({key: path}, {})

    def put_bytes(self, key: str, data: bytes) -> None:
        self.put_all({}, {key: data})

    def put_all(self, files: Mapping[str, str], data: Mapping[str, bytes]) -> None:
        """Write each object to a temporary file of this call's own and fsync it, then
        rename them all to their keys' paths and sync their directories once: one fsync
        per object and one per directory, not two per object (the syncs, not the
        copies, were most of a segment's copy time)."""
        writes: list[tuple[str, str, Callable[[str], object]]] = [
            (key, f"copying {path} to {key}", functools.partial(_copy_file, path))
            for key, path in files.items()
        ]
        writes += [
            (key, f"writing {key}", functools.partial(_write, data=blob))
            for key, blob in data.items()
        ]
        temporaries: dict[str, str] = {}
        try:
            for key, what, write in writes:
                destination = self._path(key)
                temporary = f"{destination}.{uuid.uuid4().hex}{_TEMPORARY}"
                temporaries[destination] = temporary
                with _as_remote_errors(what):
                    os.makedirs(os.path.dirname(destination), exist_ok=True)
                    write(temporary)
                    _fsync(temporary)
            with _as_remote_errors(f"renaming {', '.join([*files, *data])} into place"):
                for destination, temporary in temporaries.items():
                    os.replace(temporary, destination)
                for directory in {os.path.dirname(d) for d in temporaries}:
                    _fsync(directory)
        finally:
            for temporary in temporaries.values():
                with contextlib.suppress(FileNotFoundError):
                    os.remove(temporary)

    def get(self, key: str) -> bytes:
        return self.get_range(key, 0, None)

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        with _as_remote_errors(f"reading {key}"), open(self._path(key), "rb") as file:
            file.seek(start)
            return file.read(-1 if end is None else end - start + 1)

    def delete(self, keys: Sequence[str]) -> None:
        directories = set()
        with _as_remote_errors(f"deleting {', '.join(keys)}"):
            for key in keys:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self._path(key))
                    directories.add(os.path.dirname(self._path(key)))
            for directory in directories:
                _fsync(directory)

    def list(self, prefix: str) -> Iterator[str]:
        yield from self._walk("", prefix)

    def list_folders(self, prefix: str) -> Iterator[str]:
        folder, _, start = prefix.rpartition("/")
        folder = f"{folder}/" if folder else ""
        try:
            entries = sorted(os.scandir(self._path(folder) if folder else self.root), key=_name)
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if entry.name.startswith(start) and entry.is_dir(follow_symlinks=False):
                yield f"{folder}{entry.name}/"

    def _walk(self, folder: str, prefix: str) -> Iterator[str]:
        """Keys under ``folder`` (a key prefix ending in ``/``, or empty) that start with
        ``prefix``, descending only into folders that may hold some."""
        try:
            entries = sorted(os.scandir(self._path(folder) if folder else self.root), key=_name)
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            key = folder + entry.name
            if entry.is_dir(follow_symlinks=False):
                if (key + "/").startswith(prefix) or prefix.startswith(key + "/"):
                    yield from self._walk(key + "/", prefix)
            elif key.startswith(prefix) and not key.endswith(_TEMPORARY):
                yield key

    def close(self) -> None:
        """Nothing is held open between calls."""


class LocalTieredStorage(ObjectStoreRemoteStorageManager):
    """A RemoteStorageManager over the directory ``root`` (``rsm.config.dir``)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        super().__init__(LocalDirectoryStore(self.root))


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name


def _copy_file(source: str, path: str) -> None:
    """Copy ``source`` to the new file ``path``, written with O_DIRECT: straight from a
    page-aligned buffer to the disk, with no second page-cache copy of the segment to
    allocate, dirty and write back (that kernel work, on the broker's cores, slowed its
    own appends), and little left for the fsync after it. A file system that refuses
    O_DIRECT (tmpfs; EINVAL at open or at a write) gets ``shutil.copyfile``
    (``os.sendfile``) instead. Every read and write releases the GIL; the Python loop
    runs once per ``_DIRECT_CHUNK``."""
    try:
        _copy_file_direct(source, path)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        shutil.copyfile(source, path)


def _copy_file_direct(source: str, path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        # The view is released before the mmap closes, also on an error (an exported
        # buffer would make the close raise and hide the error).
        with (
            open(source, "rb", buffering=0) as file,
            mmap.mmap(-1, _DIRECT_CHUNK) as buffer,
            memoryview(buffer) as view,
        ):
            size = 0
            while filled := _read_fully(file, view):
                # O_DIRECT writes whole blocks: the last one padded with zeros, and
                # the file cut back to the source's length below.
                padded = -(-filled // _DIRECT_ALIGNMENT) * _DIRECT_ALIGNMENT
                view[filled:padded] = bytes(padded - filled)
                _write_fully(fd, view[:padded])
                size += filled
                if filled < len(view):
                    break
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def _read_fully(file: io.FileIO, view: memoryview) -> int:
    """Fill ``view`` from ``file``; fewer bytes only at its end."""
    filled = 0
    while filled < len(view) and (n := file.readinto(view[filled:])):
        filled += n
    return filled


def _write_fully(fd: int, view: memoryview) -> None:
    written = 0
    while written < len(view):
        written += os.write(fd, view[written:])


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)


def _fsync(path: str) -> None:
    """fsync a file, or a directory (so that renames and removals in it are durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
