"""KRaft's control records (Kafka's ``ControlRecordType``, ``ControlRecord`` and
``ControlRecordUtils``): the records of a control batch in ``__cluster_metadata``.

A control batch has the control attribute (bit 5) and no producer; each record's

    key    int16 version (0)   int16 type
    value  the message of that type, in its schema's flexible encoding (no version prefix;
           the message's own first field is its version)

    type 2  LeaderChangeMessage    the first batch of each leader's epoch
         3  SnapshotHeaderRecord   the first batch of a snapshot
         4  SnapshotFooterRecord   the last batch of a snapshot
         5  KRaftVersionRecord     \\ KIP-853 (kraft.version 1) only
         6  VotersRecord           /
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage, Voter
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.schema.types import BrokerId
from kio.schema.voters_record.v0.data import VotersRecord
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64

from tiercel.protocol.entities import ChunkWriter
from tiercel.protocol.errors import CorruptRecordError
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch

__all__ = [
    "ControlRecord",
    "ControlRecordType",
    "control_batch",
    "kraft_version_record",
    "leader_change_message",
    "snapshot_footer_record",
    "snapshot_header_record",
]

_KEY: Final = struct.Struct(">hh")
_KEY_VERSION: Final = 0
# ControlRecordUtils' *_CURRENT_VERSION: every message is written in version 0.
_CURRENT_VERSION: Final = i16(0)


class ControlRecordType(enum.IntEnum):
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


_MESSAGE_TYPES: Final[dict[ControlRecordType, type[Any]]] = {
    ControlRecordType.LEADER_CHANGE: LeaderChangeMessage,
    ControlRecordType.SNAPSHOT_HEADER: SnapshotHeaderRecord,
    ControlRecordType.SNAPSHOT_FOOTER: SnapshotFooterRecord,
    ControlRecordType.KRAFT_VERSION: KRaftVersionRecord,
    ControlRecordType.KRAFT_VOTERS: VotersRecord,
}
_TYPES_OF: Final = {message: kind for kind, message in _MESSAGE_TYPES.items()}


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """A decoded control record: its type and its kio message."""

    type: ControlRecordType
    message: Any

    @staticmethod
    def decode(key: bytes | None, value: bytes | None) -> ControlRecord:
        """CorruptRecordError for a record that is not a KRaft control record."""
        if key is None or len(key) < _KEY.size or value is None:
            raise CorruptRecordError("control record without a 4-byte key and a value")
        version, type_id = _KEY.unpack_from(key)
        if version < 0:
            raise CorruptRecordError(f"Invalid version found for control record: {version}")
        try:
            kind = ControlRecordType(type_id)
        except ValueError:
            raise CorruptRecordError(f"Unknown control record type {type_id}") from None
        try:
            message, _ = entity_reader(_MESSAGE_TYPES[kind])(memoryview(value), 0)
        except Exception as e:  # kio's reader raises its own underflow types
            raise CorruptRecordError(f"undecodable {kind.name} control record: {e}") from e
        return ControlRecord(kind, message)


def leader_change_message(
    leader_id: int, voters: Sequence[int], granting_voters: Sequence[int]
) -> LeaderChangeMessage:
    """What a new leader writes first in its epoch (LeaderState's
    appendStartOfEpochControlRecords)."""
    return LeaderChangeMessage(
        version=_CURRENT_VERSION,
        leader_id=BrokerId(leader_id),
        voters=tuple(Voter(voter_id=i32(v)) for v in sorted(voters)),
        granting_voters=tuple(Voter(voter_id=i32(v)) for v in sorted(granting_voters)),
    )


def kraft_version_record(kraft_version: int) -> KRaftVersionRecord:
    """The kraft.version feature level as a control record (KIP-853)."""
    return KRaftVersionRecord(version=_CURRENT_VERSION, k_raft_version=i16(kraft_version))


def snapshot_header_record(last_contained_log_timestamp: int) -> SnapshotHeaderRecord:
    return SnapshotHeaderRecord(
        version=_CURRENT_VERSION, last_contained_log_timestamp=i64(last_contained_log_timestamp)
    )


def snapshot_footer_record() -> SnapshotFooterRecord:
    return SnapshotFooterRecord(version=_CURRENT_VERSION)


def control_batch(base_offset: int, epoch: int, timestamp: int, messages: Sequence[Any]) -> bytes:
    """One control batch holding ``messages`` at ``base_offset``, stamped with ``epoch``,
    every record created at ``timestamp`` (Kafka's MemoryRecordsBuilder with
    isControlBatch, as MemoryRecords.withLeaderChangeMessage and its siblings build it)."""
    records = []
    for message in messages:
        writer = ChunkWriter()
        entity_writer(type(message))(writer, message)  # type: ignore[arg-type]
        key = _KEY.pack(_KEY_VERSION, _TYPES_OF[type(message)])
        records.append(SimpleRecord(key, b"".join(writer.chunks()), timestamp=timestamp))
    return build_record_batch(
        records, base_offset=base_offset, partition_leader_epoch=epoch, is_control=True
    )
