"""Producer state snapshot files, ``<20-digit offset>.snapshot``, in Kafka's format.

A snapshot holds the producer state of a partition as of its (exclusive) end offset, the
number in its name, so that loading a log replays only the batches after it. The bytes
are Kafka's ``ProducerSnapshot`` message, version 1, big-endian, prefixed by its version:

    offset  size  field
         0     2  version                  int16   1
         2     4  crc                      uint32  CRC-32C of bytes [6, end)
         6     4  entry count              int32
        10    46  entries, one per producer, each:
                    producer_id            int64
                    epoch                  int16
                    last_sequence          int32   -1 when no batch is known
                    last_offset            int64   -1 when no batch is known
                    offset_delta           int32   last - first offset of that batch
                    timestamp              int64   max timestamp of that batch
                    coordinator_epoch      int32
                    current_txn_first_offset int64 -1 outside a transaction

Only the latest batch of each producer is stored, as in Kafka: after a load, older
batches are known again only if they are replayed from the log.

`encode_snapshot` / `decode_snapshot` are pure; the file functions are *blocking* (any
thread; call them from an executor, or from a loader that already runs in one).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterable
from typing import Final

import crc32c

from tiercel.storage.checkpoint_file import atomic_write
from tiercel.storage.file_names import SNAPSHOT_FILE_SUFFIX, offset_from_file_name
from tiercel.storage.producer_state_entry import BatchMetadata, ProducerStateEntry

__all__ = [
    "SNAPSHOT_VERSION",
    "CorruptSnapshotError",
    "decode_snapshot",
    "encode_snapshot",
    "list_snapshot_offsets",
    "read_snapshot_file",
    "remove_snapshot_file",
    "write_snapshot_file",
]

SNAPSHOT_VERSION: Final = 1
_HEADER: Final = struct.Struct(">hIi")
_ENTRY: Final = struct.Struct(">qhiqiqiq")
_CRC_START: Final = 6


class CorruptSnapshotError(Exception):
    """A snapshot file that cannot be trusted: unknown version, short, or a CRC mismatch.
    The loader deletes it and falls back to an older snapshot (Kafka does the same)."""


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The whole file for ``entries`` (written in producer id order)."""
    ordered = sorted(entries, key=lambda e: e.producer_id)
    body = bytearray(_HEADER.size + _ENTRY.size * len(ordered))
    pos = _HEADER.size
    for entry in ordered:
        _ENTRY.pack_into(
            body,
            pos,
            entry.producer_id,
            entry.producer_epoch,
            entry.last_seq,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
        )
        pos += _ENTRY.size
    _HEADER.pack_into(body, 0, SNAPSHOT_VERSION, 0, len(ordered))
    crc = crc32c.crc32c(memoryview(body)[_CRC_START:])
    struct.pack_into(">I", body, 2, crc)
    return bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """The entries of a snapshot file's bytes; CorruptSnapshotError if they are not one."""
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot has unknown version {version}")
    if count < 0 or len(data) < _HEADER.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
    computed = crc32c.crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(f"snapshot CRC {crc:#010x} does not match {computed:#010x}")
    entries = []
    for fields in _ENTRY.iter_unpack(data[_HEADER.size : _HEADER.size + count * _ENTRY.size]):
        producer_id, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn = fields
        batch = BatchMetadata(last_seq, last_offset, delta, timestamp) if last_offset >= 0 else None
        entries.append(
            ProducerStateEntry(
                producer_id,
                epoch,
                coordinator_epoch,
                timestamp,
                txn if txn >= 0 else None,
                batch,
            )
        )
    return entries


def read_snapshot_file(path: str) -> list[ProducerStateEntry]:
    """*Blocking.* The entries of the snapshot at ``path``."""
    with open(path, "rb") as f:
        return decode_snapshot(f.read())


def write_snapshot_file(path: str, data: bytes) -> None:
    """*Blocking.* Write ``data`` durably under ``path`` with the checkpoints'
    `atomic_write` (temporary file, fsync, rename, directory fsync), so that no reader or
    crash sees half a file (a leftover ``.tmp`` is removed by the next load)."""
    atomic_write(path, data)


def remove_snapshot_file(path: str) -> None:
    """*Blocking.* Delete a snapshot file; one already gone is fine."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def list_snapshot_offsets(directory: str) -> list[int]:
    """*Blocking.* The offsets of the ``<offset>.snapshot`` files in ``directory``, sorted."""
    offsets = []
    for name in os.listdir(directory):
        if not name.endswith(SNAPSHOT_FILE_SUFFIX):
            continue
        with contextlib.suppress(ValueError):
            offsets.append(offset_from_file_name(name))
    return sorted(offsets)
