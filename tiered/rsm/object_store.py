"""The few operations the remote tier needs of an object store.

A RemoteStorageManager over an object store (`object_store_rsm`) and the listing of a
partition's remote segments (`remote_listing`) need only these; a local directory
(`local_tiered_storage`) and an S3 bucket (`s3_remote_storage`) provide them. Keys are
``/``-separated and relative to the store's root (a directory, or a bucket and prefix),
the keys of `object_layout`.

Errors: `RemoteResourceNotFoundError` when a read names a key that is not there, any
other failure a `RemoteStorageError` (retriable). Blocking; any thread.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

__all__ = ["ObjectStore"]


class ObjectStore(Protocol):
    """A flat namespace of immutable objects. Thread-safe; blocking."""

    def put_file(self, key: str, path: str) -> None:
        """Store the file at ``path`` under ``key``, replacing any object there; durable
        when this returns, and never visible half-written."""

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``, as `put_file`."""

    def put_all(self, files: Mapping[str, str], data: Mapping[str, bytes]) -> None:
        """`put_file` of each key -> path of ``files`` and `put_bytes` of each key ->
        bytes of ``data``, in any order: all durable when this returns. A store may make
        them durable together, cheaper than one by one."""

    def get(self, key: str) -> bytes:
        """The whole object."""

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        """The object's bytes ``start`` to ``end`` inclusive (to its end when None), as an
        HTTP byte range; fewer at the object's end, none from past it."""

    def delete(self, keys: Sequence[str]) -> None:
        """Remove ``keys``, ignoring those not there; durable when this returns."""

    def list(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix`` (any string, not only a folder)."""

    def list_folders(self, prefix: str) -> Iterator[str]:
        """The distinct ``<prefix><name>/`` that begin some key: the folders just below
        the last ``/`` of ``prefix`` whose names start with what follows it (S3's
        listing with a ``/`` delimiter)."""

    def close(self) -> None:
        """Release connections."""
