"""Snapshot files of the metadata partition (Kafka's ``Snapshots`` and ``SnapshotPath``).

In the partition directory, next to the log segments (KIP-630):

    00000000000000001234-0000000005.checkpoint          a frozen snapshot: end offset
                                                        1234 (exclusive), epoch 5
    00000000000000001234-0000000005-<random>.checkpoint.part    being written
    00000000000000001234-0000000005.checkpoint.deleted          marked for deletion

A snapshot file is record batches, as a segment holds them but with offsets counted
from 0: a control batch with the SnapshotHeaderRecord, the data batches, a control batch
with the SnapshotFooterRecord.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import Final

from tiercel.server.raft.offset_and_epoch import OffsetAndEpoch

__all__ = [
    "BOOTSTRAP_SNAPSHOT_ID",
    "DELETE_SUFFIX",
    "PARTIAL_SUFFIX",
    "SUFFIX",
    "SnapshotPath",
    "delete_if_exists",
    "filename_from_snapshot_id",
    "mark_for_delete",
    "parse",
    "snapshot_path",
]

SUFFIX: Final = ".checkpoint"
PARTIAL_SUFFIX: Final = ".checkpoint.part"
DELETE_SUFFIX: Final = ".checkpoint.deleted"
# The bootstrap checkpoint of `kafka-storage format`: never replicated (KafkaRaftClient).
BOOTSTRAP_SNAPSHOT_ID: Final = OffsetAndEpoch(0, 0)
_NAME: Final = re.compile(r"(\d{20})-(\d{10})")


@dataclass(frozen=True, slots=True)
class SnapshotPath:
    path: str
    snapshot_id: OffsetAndEpoch
    partial: bool
    deleted: bool


def filename_from_snapshot_id(snapshot_id: OffsetAndEpoch) -> str:
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}"


def snapshot_path(log_dir: str, snapshot_id: OffsetAndEpoch) -> str:
    return os.path.join(log_dir, filename_from_snapshot_id(snapshot_id) + SUFFIX)


def parse(path: str) -> SnapshotPath | None:
    """The snapshot a file name denotes, or None if it is no snapshot file."""
    name = os.path.basename(path)
    partial = name.endswith(PARTIAL_SUFFIX)
    deleted = name.endswith(DELETE_SUFFIX)
    if not (partial or deleted or name.endswith(SUFFIX)):
        return None
    match = _NAME.match(name)
    if match is None:
        return None
    snapshot_id = OffsetAndEpoch(int(match.group(1)), int(match.group(2)))
    return SnapshotPath(path, snapshot_id, partial, deleted)


def mark_for_delete(log_dir: str, snapshot_id: OffsetAndEpoch) -> str:
    """Rename the snapshot ``.checkpoint.deleted`` (a metadata update: cheap on the
    loop); the file itself goes later (Kafka's markForDelete)."""
    path = snapshot_path(log_dir, snapshot_id)
    deleted = path.removesuffix(SUFFIX) + DELETE_SUFFIX
    os.replace(path, deleted)
    return deleted


def delete_if_exists(log_dir: str, snapshot_id: OffsetAndEpoch) -> None:
    """*Blocking.* Remove the snapshot's files, frozen or marked for deletion."""
    path = snapshot_path(log_dir, snapshot_id)
    for candidate in (path, path.removesuffix(SUFFIX) + DELETE_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.remove(candidate)
