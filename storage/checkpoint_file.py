"""Kafka's small text files: offset checkpoints, the leader-epoch checkpoint, partition.metadata.

Checkpoint layout (UTF-8 text, "\\n" line ends; entry fields separated by one space):

    0                      <- format version, always 0
    2                      <- number of entries that follow
    my-topic 0 1234        <- OffsetCheckpointFile entry: topic partition offset
    my-topic 1 98
                              LeaderEpochCheckpointFile entry: epoch startOffset ("3 500")

partition.metadata layout (UTF-8 text, no trailing newline, as Kafka writes it):

    version: 0
    topic_id: <Kafka Uuid string: URL-safe base64 of the 16 bytes, no padding>

Every file is replaced atomically: written to `<path>.tmp`, fsynced, renamed over `<path>`,
then the directory is fsynced so the rename itself survives a crash. Readers never see a
partial file, so malformed content means real corruption and is reported as
`CorruptCheckpointError` naming the file and the line.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Generic, TypeVar

from tiercel.protocol.errors import KafkaStorageError
from tiercel.storage.epoch_entry import EpochEntry
from tiercel.storage.topic_partition import TopicPartition

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT_FILENAME",
    "LEADER_EPOCH_CHECKPOINT_FILENAME",
    "LOG_START_OFFSET_CHECKPOINT_FILENAME",
    "PARTITION_METADATA_FILENAME",
    "RECOVERY_POINT_OFFSET_CHECKPOINT_FILENAME",
    "REPLICATION_OFFSET_CHECKPOINT_FILENAME",
    "CheckpointFile",
    "CorruptCheckpointError",
    "LeaderEpochCheckpointFile",
    "OffsetCheckpointFile",
    "PartitionMetadataFile",
    "atomic_write",
    "kafka_str_to_uuid",
    "uuid_to_kafka_str",
]

log = logging.getLogger(__name__)

RECOVERY_POINT_OFFSET_CHECKPOINT_FILENAME = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILENAME = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILENAME = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT_FILENAME = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT_FILENAME = "leader-epoch-checkpoint"
PARTITION_METADATA_FILENAME = "partition.metadata"

_CHECKPOINT_VERSION = 0
_PARTITION_METADATA_VERSION = 0
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
# Java's Integer/Long.parseLong accept an optional sign and ASCII digits only; Python's int()
# would also take underscores and non-ASCII digits, which Kafka would reject.
_INTEGER = re.compile(r"[+-]?[0-9]+")
# Java's BufferedReader.readLine ends a line at "\n", "\r\n" or "\r" and nothing else.
_LINE_END = re.compile(r"\r\n|\r|\n")
_KAFKA_UUID = re.compile(r"[A-Za-z0-9_-]{22}(?:==)?")

T = TypeVar("T")


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint-style file exists but its content is not in Kafka's format."""

    def __init__(self, path: str, line_number: int, detail: str) -> None:
        super().__init__(f"Malformed checkpoint file {path}, line {line_number}: {detail}")
        self.path = path
        self.line_number = line_number


def atomic_write(path: str, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content.

    Any thread; blocking (two fsyncs): call from an executor. Raises OSError.
    """
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read_text(path: str) -> str | None:
    """The file's text, or None when it does not exist. Blocking."""
    try:
        with open(path, "rb") as file:
            return file.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(path, 1, f"not UTF-8 text ({e})") from e
    except OSError as e:
        raise KafkaStorageError(f"Error while reading checkpoint file {path}: {e}") from e


def _split_lines(text: str) -> list[str]:
    lines = _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def _parse_int(text: str, bits: int) -> int:
    """Parse a Java int (bits=32) or long (bits=64); ValueError when Java would refuse it."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"not an integer: {text!r}")
    value = int(text)
    bound = _INT32_MAX if bits == 32 else _INT64_MAX
    if not -bound - 1 <= value <= bound:
        raise ValueError(f"{text} does not fit in {bits} bits")
    return value


class CheckpointFile(Generic[T]):
    """A versioned list of entries in Kafka's checkpoint text format (Kafka's `CheckpointFile`).

    Invariants: the file is only ever replaced atomically; a missing file reads as no entries
    (a fresh log dir has none yet). `parse_entry` receives a line's whitespace-separated fields
    and raises ValueError when they are not a valid entry.

    Thread/loop contract: any thread; `read` and `write` are blocking file IO, call them from an
    executor. Writes through one instance are serialised, so overlapping writers cannot
    clobber each other's temp file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        version: int,
        format_entry: Callable[[T], str],
        parse_entry: Callable[[Sequence[str]], T],
    ) -> None:
        self._path = os.fspath(path)
        self._version = version
        self._format_entry = format_entry
        self._parse_entry = parse_entry
        self._write_lock = threading.Lock()

    @property
    def path(self) -> str:
        return self._path

    def write(self, entries: Collection[T]) -> None:
        """Atomically replace the file with `entries`. Blocking; raises KafkaStorageError."""
        try:
            self._write(entries)
        except OSError as e:
            raise KafkaStorageError(f"Error while writing checkpoint file {self._path}: {e}") from e

    def write_if_dir_exists(self, entries: Collection[T]) -> bool:
        """Like `write`, but skip (returning False) when the directory has gone away.

        Kafka uses this for flushes that run after the fact, when the partition directory may
        have been renamed for deletion in the meantime. Blocking.
        """
        try:
            self._write(entries)
        except FileNotFoundError as e:
            if not os.path.isdir(os.path.dirname(self._path) or "."):
                log.warning("Skipped writing %s: its directory no longer exists", self._path)
                return False
            raise KafkaStorageError(f"Error while writing checkpoint file {self._path}: {e}") from e
        except OSError as e:
            raise KafkaStorageError(f"Error while writing checkpoint file {self._path}: {e}") from e
        return True

    def _write(self, entries: Collection[T]) -> None:
        lines = [str(self._version), str(len(entries))]
        lines.extend(self._format_entry(entry) for entry in entries)
        lines.append("")
        with self._write_lock:
            atomic_write(self._path, "\n".join(lines).encode("utf-8"))

    def read(self) -> list[T]:
        """The entries in the file, [] when it does not exist. Blocking.

        Raises CorruptCheckpointError on an unknown version, a malformed line or an entry count
        that disagrees with the count line; KafkaStorageError on other IO errors. Like Kafka, a
        file that stops after its version or count line holds no entries.
        """
        text = _read_text(self._path)
        if text is None:
            return []
        lines = _split_lines(text)
        if not lines:
            return []
        try:
            version = _parse_int(lines[0], 32)
        except ValueError as e:
            raise CorruptCheckpointError(self._path, 1, str(e)) from e
        if version != self._version:
            raise CorruptCheckpointError(
                self._path, 1, f"unrecognised version {version}, expected {self._version}"
            )
        if len(lines) == 1:
            return []
        try:
            expected = _parse_int(lines[1], 32)
        except ValueError as e:
            raise CorruptCheckpointError(self._path, 2, str(e)) from e
        entries = [self._parse_line(number, line) for number, line in enumerate(lines[2:], 3)]
        if len(entries) != expected:
            raise CorruptCheckpointError(
                self._path, len(lines), f"expected {expected} entries but found {len(entries)}"
            )
        return entries

    def _parse_line(self, number: int, line: str) -> T:
        try:
            return self._parse_entry(line.split())
        except ValueError as e:
            raise CorruptCheckpointError(self._path, number, f"{line!r}: {e}") from e


def _format_offset(item: tuple[TopicPartition, int]) -> str:
    tp, offset = item
    return f"{tp.topic} {tp.partition} {offset}"


def _parse_offset(fields: Sequence[str]) -> tuple[TopicPartition, int]:
    if len(fields) != 3:
        raise ValueError(f"expected 3 fields (topic partition offset), found {len(fields)}")
    topic, partition, offset = fields
    return TopicPartition(topic, _parse_int(partition, 32)), _parse_int(offset, 64)


class OffsetCheckpointFile:
    """A map of partition to offset, one "topic partition offset" line each.

    Used for the log-dir files `recovery-point-offset-checkpoint`,
    `replication-offset-checkpoint`, `log-start-offset-checkpoint` and
    `cleaner-offset-checkpoint`. Invariants and thread contract: those of `CheckpointFile`
    (any thread; blocking, call from an executor).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file = CheckpointFile(path, _CHECKPOINT_VERSION, _format_offset, _parse_offset)

    @property
    def path(self) -> str:
        return self._file.path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Atomically replace the file with `offsets`. Blocking; raises KafkaStorageError."""
        self._file.write(list(offsets.items()))

    def read(self) -> dict[TopicPartition, int]:
        """The offsets in the file, {} when it does not exist. Blocking."""
        return dict(self._file.read())


def _format_epoch(entry: EpochEntry) -> str:
    return f"{entry.epoch} {entry.start_offset}"


def _parse_epoch(fields: Sequence[str]) -> EpochEntry:
    if len(fields) != 2:
        raise ValueError(f"expected 2 fields (epoch startOffset), found {len(fields)}")
    return EpochEntry(_parse_int(fields[0], 32), _parse_int(fields[1], 64))


class LeaderEpochCheckpointFile:
    """A partition's `leader-epoch-checkpoint`: one "epoch startOffset" line per epoch.

    Invariants: stores whatever it is given, in order (the cache keeps entries monotonic and
    re-validates them on load). Thread contract: that of `CheckpointFile` (any thread;
    blocking, call from an executor).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file = CheckpointFile(path, _CHECKPOINT_VERSION, _format_epoch, _parse_epoch)

    @property
    def path(self) -> str:
        return self._file.path

    def write(self, entries: Sequence[EpochEntry]) -> None:
        """Atomically replace the file with `entries`. Blocking; raises KafkaStorageError."""
        self._file.write(entries)

    def write_if_dir_exists(self, entries: Sequence[EpochEntry]) -> bool:
        """`write`, skipped (False) if the partition directory was removed meanwhile."""
        return self._file.write_if_dir_exists(entries)

    def read(self) -> list[EpochEntry]:
        """The entries in the file, [] when it does not exist. Blocking."""
        return self._file.read()


def uuid_to_kafka_str(value: uuid.UUID) -> str:
    """Kafka's `Uuid.toString()`: URL-safe base64 of the 16 bytes without padding (22 chars)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def random_kafka_uuid() -> uuid.UUID:
    """Kafka's `Uuid.randomUuid()`: random, never the zero Uuid nor the metadata topic's
    id (1), and never one whose string starts with '-', which command lines (kafka-topics
    --topic-id, tiercel remote-segments --topic-id) would read as an option."""
    while True:
        value = uuid.uuid4()
        if value.int > 1 and not uuid_to_kafka_str(value).startswith("-"):
            return value


def kafka_str_to_uuid(text: str) -> uuid.UUID:
    """Kafka's `Uuid.fromString()`; ValueError unless `text` is 16 bytes in URL-safe base64."""
    if not _KAFKA_UUID.fullmatch(text):
        raise ValueError(f"Not a base64 Kafka Uuid: {text!r}")
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text[:22] + "=="))
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"Not a base64 Kafka Uuid: {text!r}") from e


class PartitionMetadataFile:
    """A partition's `partition.metadata`: the id of the topic the partition belongs to.

    Invariants: holds version 0 and a non-zero topic id (Kafka treats the all-zero Uuid as "no
    id"); written byte for byte as Kafka writes it, atomically. Thread/loop contract: any
    thread; `read` and `write` are blocking, call them from an executor.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        self._write_lock = threading.Lock()

    @property
    def path(self) -> str:
        return self._path

    def write(self, topic_id: uuid.UUID) -> None:
        """Atomically record `topic_id`. Blocking; raises KafkaStorageError on IO errors."""
        if topic_id.int == 0:
            raise ValueError("The zero Uuid is not a topic id")
        text = f"version: {_PARTITION_METADATA_VERSION}\ntopic_id: {uuid_to_kafka_str(topic_id)}"
        try:
            with self._write_lock:
                atomic_write(self._path, text.encode("utf-8"))
        except OSError as e:
            raise KafkaStorageError(f"Error while writing {self._path}: {e}") from e

    def read(self) -> uuid.UUID | None:
        """The recorded topic id, None when the file does not exist. Blocking.

        Raises CorruptCheckpointError on malformed content. Like Kafka, versions newer than 0
        are accepted (their first two lines are the same).
        """
        text = _read_text(self._path)
        if text is None:
            return None
        lines = _split_lines(text)
        version = self._field(lines, 0, "version")
        try:
            if _parse_int(version, 32) < _PARTITION_METADATA_VERSION:
                raise ValueError(f"unrecognised version {version}")
        except ValueError as e:
            raise CorruptCheckpointError(self._path, 1, str(e)) from e
        try:
            topic_id = kafka_str_to_uuid(self._field(lines, 1, "topic_id"))
        except ValueError as e:
            raise CorruptCheckpointError(self._path, 2, str(e)) from e
        if topic_id.int == 0:
            raise CorruptCheckpointError(self._path, 2, "the topic id is the zero Uuid")
        return topic_id

    def _field(self, lines: list[str], index: int, key: str) -> str:
        """The value of a "key: value" line; Kafka splits on a colon and following spaces."""
        line = lines[index] if index < len(lines) else ""
        match = re.fullmatch(rf"{key}:\s+(\S+)\s*", line)
        if match is None:
            raise CorruptCheckpointError(self._path, index + 1, f"expected '{key}: <value>'")
        return match.group(1)
