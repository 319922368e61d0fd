"""A snapshot of one ``__remote_log_metadata`` partition's consumption: the offset read
up to and the view of every user partition followed from it, so that a restarted broker
reads only the tail of the topic. Modelled on Kafka 3.x's RemoteLogMetadataSnapshotFile
(whose entries are RemoteLogSegmentMetadataSnapshotRecord values), extended to all the
user partitions of a metadata partition and guarded by a checksum.

One file per metadata partition, ``<log dir>/__remote_log_metadata_snapshot/
remote_log_snapshot-<metadata partition>``, replaced atomically (`atomic_write`).
Layout, big-endian:

    version              int16    0
    metadata partition   int32
    consumed offset      int64    the last offset read (-1: none)
    partition count      int32
    per user partition:
      topic              int16 length + UTF-8
      topic id           16 bytes
      partition          int32
      delete state       int32 length + a RemotePartitionDeleteMetadataRecord value
                         (-1: the partition is not being deleted)
      segment count      int32
      per segment        int32 length + a RemoteLogSegmentMetadataSnapshotRecord value,
                         in `RemoteLogMetadataCache.segments_in_replay_order`
    crc                  uint32   CRC-32C of everything before it

A file that fails any check is reported by `read_snapshots` and skipped: its metadata
partition is then read from the start.
"""

from __future__ import annotations

import logging
import os
import struct
import uuid
from dataclasses import dataclass, field
from typing import Final

import crc32c

from tiercel.config.logging_setup import log_event
from tiercel.protocol.message_codec import MessageFormatError
from tiercel.storage.checkpoint_file import atomic_write
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_manager import RemotePartitionDeleteMetadata
from tiercel.tiered.rlmm.remote_log_metadata_serde import deserialize, serialize
from tiercel.tiered.rlmm.remote_log_segment_metadata_snapshot import (
    RemoteLogSegmentMetadataSnapshot,
)

__all__ = [
    "SNAPSHOT_DIR_NAME",
    "CorruptSnapshotError",
    "MetadataPartitionSnapshot",
    "PartitionView",
    "decode_snapshot",
    "encode_snapshot",
    "read_snapshots",
    "snapshot_path",
    "write_snapshot",
]

_log: Final = logging.getLogger("tiercel.rlmm")

SNAPSHOT_DIR_NAME: Final = "__remote_log_metadata_snapshot"
_FILE_PREFIX: Final = "remote_log_snapshot-"
_VERSION: Final = 0
_HEADER: Final = struct.Struct(">hiqi")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_CRC: Final = struct.Struct(">I")


class CorruptSnapshotError(ValueError):
    """The file is not a snapshot this broker wrote."""


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One user partition's remote segments and delete state. A value."""

    segments: list[RemoteLogSegmentMetadataSnapshot] = field(default_factory=list)
    delete: RemotePartitionDeleteMetadata | None = None


@dataclass(frozen=True, slots=True)
class MetadataPartitionSnapshot:
    """Invariant: every view holds exactly the events of records at or below
    ``consumed_offset`` of ``metadata_partition``. A value."""

    metadata_partition: int
    consumed_offset: int
    partitions: dict[TopicIdPartition, PartitionView]


def encode_snapshot(snapshot: MetadataPartitionSnapshot) -> bytes:
    out = bytearray(
        _HEADER.pack(
            _VERSION,
            snapshot.metadata_partition,
            snapshot.consumed_offset,
            len(snapshot.partitions),
        )
    )
    for partition, view in snapshot.partitions.items():
        topic = partition.topic_partition.topic.encode()
        out += _INT16.pack(len(topic)) + topic + partition.topic_id.bytes
        out += _INT32.pack(partition.topic_partition.partition)
        _put_entry(out, None if view.delete is None else serialize(view.delete))
        out += _INT32.pack(len(view.segments))
        for segment in view.segments:
            _put_entry(out, serialize(segment))
    out += _CRC.pack(crc32c.crc32c(out))
    return bytes(out)


def _put_entry(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += _INT32.pack(-1)
    else:
        out += _INT32.pack(len(value)) + value


class _Cursor:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptSnapshotError(f"ends early: {n} bytes wanted at {self.pos}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        return fmt.unpack(self.take(fmt.size))

    def entry(self) -> bytes | None:
        (length,) = self.unpack(_INT32)
        return None if length == -1 else self.take(length)


def decode_snapshot(data: bytes) -> MetadataPartitionSnapshot:
    """CorruptSnapshotError for anything but a complete, intact snapshot."""
    if len(data) < _HEADER.size + _CRC.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is too short")
    (stored_crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    body = data[: -_CRC.size]
    if crc32c.crc32c(body) != stored_crc:
        raise CorruptSnapshotError("checksum mismatch")
    cursor = _Cursor(body)
    version, metadata_partition, consumed_offset, count = cursor.unpack(_HEADER)
    if version != _VERSION:
        raise CorruptSnapshotError(f"unknown version {version}")
    partitions = {}
    try:
        for _ in range(count):
            partition, view = _decode_partition(cursor)
            partitions[partition] = view
    except (MessageFormatError, UnicodeDecodeError) as e:
        raise CorruptSnapshotError(str(e)) from None
    if cursor.pos != len(body):
        raise CorruptSnapshotError(f"{len(body) - cursor.pos} bytes after the last partition")
    return MetadataPartitionSnapshot(metadata_partition, consumed_offset, partitions)


def _decode_partition(cursor: _Cursor) -> tuple[TopicIdPartition, PartitionView]:
    (name_length,) = cursor.unpack(_INT16)
    topic = cursor.take(name_length).decode()
    topic_id = uuid.UUID(bytes=cursor.take(16))
    (number,) = cursor.unpack(_INT32)
    partition = TopicIdPartition(topic_id, TopicPartition(topic, number))
    delete_bytes = cursor.entry()
    delete = None
    if delete_bytes is not None:
        decoded = deserialize(delete_bytes)
        if not isinstance(decoded, RemotePartitionDeleteMetadata):
            raise CorruptSnapshotError(f"{type(decoded).__name__} where a delete state belongs")
        delete = decoded
    (segment_count,) = cursor.unpack(_INT32)
    segments = []
    for _ in range(segment_count):
        segment = deserialize(cursor.entry() or b"")
        if not isinstance(segment, RemoteLogSegmentMetadataSnapshot):
            raise CorruptSnapshotError(f"{type(segment).__name__} where a segment belongs")
        segments.append(segment)
    return partition, PartitionView(segments, delete)


def snapshot_path(directory: str, metadata_partition: int) -> str:
    return os.path.join(directory, f"{_FILE_PREFIX}{metadata_partition}")


def write_snapshot(directory: str, snapshot: MetadataPartitionSnapshot) -> None:
    """Blocking (fsyncs): call from an executor. Raises OSError."""
    os.makedirs(directory, exist_ok=True)
    atomic_write(snapshot_path(directory, snapshot.metadata_partition), encode_snapshot(snapshot))


def read_snapshots(directory: str) -> dict[int, MetadataPartitionSnapshot]:
    """Every intact snapshot in ``directory`` by metadata partition; a corrupt or
    unreadable file is logged and left out. Blocking: call from an executor."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return {}
    snapshots = {}
    for name in names:
        if not name.startswith(_FILE_PREFIX) or name.endswith(".tmp"):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as file:
                snapshot = decode_snapshot(file.read())
            if name != f"{_FILE_PREFIX}{snapshot.metadata_partition}":
                raise CorruptSnapshotError(
                    f"holds metadata partition {snapshot.metadata_partition}"
                )
        except (OSError, CorruptSnapshotError) as e:
            log_event(_log, logging.WARNING, "rlmm_snapshot_ignored", path=path, reason=str(e))
            continue
        snapshots[snapshot.metadata_partition] = snapshot
    return snapshots
