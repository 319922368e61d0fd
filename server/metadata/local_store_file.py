"""The file behind LocalMetadataStore: its JSON document, lock and atomic rewrite.

`metadata-store.json` (UTF-8 JSON, nodes sorted by path, one a line):

    {"version": 1, "nodes": {
    "/": {"ctime": 1700000000000, "mtime": 1700000000000, "version": 0, "encoding": ...},
    "/b": {"ctime": <ms>, "mtime": <ms>, "version": 0, "encoding": "base64", "data": "3q2+7w=="},
    "/c": {"ctime": <ms>, "mtime": <ms>, "version": 4, "encoding": "utf-8", "data": "{\\"id\\":1}"}
    }}

`version` is the format version. Each node maps to its Stat fields and its bytes: `encoding`
"utf-8" when the bytes are valid UTF-8 (Kafka's znodes hold JSON, so the file stays readable),
else "base64". Only persistent nodes are stored, and every stored node's parent is stored
(ephemeral nodes cannot have children). The file is replaced whole: written to
`metadata-store.json.tmp`, fsynced, renamed over the old one, and the directory fsynced, so a
crash leaves the old or the new document, never a mix. `metadata-store.lock` carries an flock
while a store has the directory open.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import json.encoder
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tiercel.server.metadata.store import MetadataStoreError, check_path

__all__ = ["FILE_NAME", "CorruptMetadataStoreError", "Node", "StoreFile", "now_ms", "split"]

FILE_NAME = "metadata-store.json"
_TMP_NAME = FILE_NAME + ".tmp"
_LOCK_NAME = "metadata-store.lock"
_FORMAT_VERSION = 1

# JSON string literal of a str, leaving non-ASCII as is (the file is UTF-8).
_json_string: Callable[[str], str] = json.encoder.encode_basestring


class CorruptMetadataStoreError(MetadataStoreError):
    """The store file is not a valid document; `file` is its path."""

    def __init__(self, file: str, reason: str) -> None:
        super().__init__(f"metadata store file {file} is corrupt: {reason}")
        self.file = file


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def split(path: str) -> tuple[str, str]:
    """(parent path, name) of a non-root path."""
    parent, _, name = path.rpartition("/")
    return parent or "/", name


@dataclass(frozen=True, slots=True)
class Node:
    data: bytes
    version: int
    ctime: int
    mtime: int
    ephemeral_owner: int
    # Not stored: nodes read from the file were created before this store opened (0).
    czxid: int = 0


def _encode(nodes: Mapping[str, Node]) -> bytes:
    # Formatted by hand, one node a line: readable, and about 4x faster than json.dumps with
    # an indent, which matters because a write re-encodes every node.
    lines = []
    for path in sorted(nodes):
        node = nodes[path]
        if node.ephemeral_owner:
            continue
        try:
            encoding, text = "utf-8", node.data.decode("utf-8")
        except UnicodeDecodeError:
            encoding, text = "base64", base64.b64encode(node.data).decode("ascii")
        lines.append(
            f'{_json_string(path)}: {{"ctime": {node.ctime}, "mtime": {node.mtime}, '
            f'"version": {node.version}, "encoding": "{encoding}", "data": {_json_string(text)}}}'
        )
    body = ",\n".join(lines)
    return f'{{"version": {_FORMAT_VERSION}, "nodes": {{\n{body}\n}}}}\n'.encode()


def _decode_node(entry: Any) -> Node:
    """One stored node; ValueError (UnicodeError and binascii.Error are ValueErrors) if bad."""
    if not isinstance(entry, dict):
        raise ValueError("entry is not an object")
    version, ctime, mtime = entry.get("version"), entry.get("ctime"), entry.get("mtime")
    if type(version) is not int or type(ctime) is not int or type(mtime) is not int:
        raise ValueError("version, ctime and mtime must be integers")
    if version < 0:
        raise ValueError(f"negative version {version}")
    encoding, text = entry.get("encoding"), entry.get("data")
    if not isinstance(text, str):
        raise ValueError("data is not a string")
    if encoding == "utf-8":
        data = text.encode("utf-8")
    elif encoding == "base64":
        data = base64.b64decode(text, validate=True)
    else:
        raise ValueError(f"unknown encoding {encoding!r}")
    return Node(data, version, ctime, mtime, 0)


def _decode(raw: bytes, file: str) -> dict[str, Node]:
    try:
        document = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise CorruptMetadataStoreError(file, f"not UTF-8 JSON ({exc})") from exc
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), dict):
        raise CorruptMetadataStoreError(file, "not an object with a 'nodes' object")
    if document.get("version") != _FORMAT_VERSION:
        raise CorruptMetadataStoreError(file, f"unknown format version {document.get('version')!r}")
    nodes: dict[str, Node] = {}
    for path, entry in document["nodes"].items():
        try:
            nodes[check_path(path)] = _decode_node(entry)
        except ValueError as exc:
            raise CorruptMetadataStoreError(file, f"node {path!r}: {exc}") from exc
    if "/" not in nodes:
        raise CorruptMetadataStoreError(file, "no root node")
    for path in nodes:
        if path != "/" and split(path)[0] not in nodes:
            raise CorruptMetadataStoreError(file, f"node {path!r} has no parent")
    return nodes


class StoreFile:
    """The store's files in one directory: the lock, the document and its temp file.

    `open()` takes the lock and must come first; `release()` drops it. Any thread; blocking,
    call from an executor (`release()` only closes a descriptor and may run on the loop).
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, FILE_NAME)
        self._tmp_path = os.path.join(directory, _TMP_NAME)
        self._lock_fd: int | None = None

    def open(self) -> dict[str, Node]:
        """Lock the directory and load the persistent nodes (creating the file if absent)."""
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(os.path.join(self.directory, _LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise MetadataStoreError(
                f"metadata store directory {self.directory} is in use by another store"
            ) from None
        self._lock_fd = fd
        try:
            return self._load()
        except BaseException:
            self.release()
            raise

    def _load(self) -> dict[str, Node]:
        # A leftover temp file is a write that crashed before its rename: never acknowledged.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp_path)
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            # A new store: written at once so that the root's ctime stays fixed.
            now = now_ms()
            nodes = {"/": Node(b"", 0, now, now, 0)}
            self.write(nodes)
            return nodes
        return _decode(raw, self.path)

    def write(self, nodes: Mapping[str, Node]) -> None:
        """Durably replace the document with the persistent nodes among `nodes`."""
        raw = _encode(nodes)
        with open(self._tmp_path, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(self._tmp_path, self.path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
