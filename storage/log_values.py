"""Small immutable values passed between the log layers (Kafka's names)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from tiercel.protocol.end_txn_marker import EndTransactionMarker
from tiercel.protocol.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE

Buffer = bytes | bytearray | memoryview

UNKNOWN_OFFSET = -1
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """An offset and, when known, where it lives: segment base offset and byte position.

    The position lets a delayed fetch measure how many bytes are available between two
    offsets without touching the disk.
    """

    message_offset: int
    segment_base_offset: int = UNKNOWN_OFFSET
    relative_position_in_segment: int = -1

    @property
    def message_offset_only(self) -> bool:
        return self.segment_base_offset == UNKNOWN_OFFSET

    def on_same_segment(self, other: LogOffsetMetadata) -> bool:
        return (
            not self.message_offset_only and self.segment_base_offset == other.segment_base_offset
        )

    def position_diff(self, other: LogOffsetMetadata) -> int:
        """Bytes from ``other`` to this offset; both must be on the same segment."""
        return self.relative_position_in_segment - other.relative_position_in_segment


@dataclass(frozen=True, slots=True)
class AppendBatch:
    """A validated batch ready to be written: its bytes (as chunks, so that the header
    rewrite needs no copy of the records), what the indexes need to know of it, and its
    producer fields (from the header) for the producer state. A control batch carries
    ``is_control`` and, when it is a COMMIT or ABORT marker, ``end_txn_marker``."""

    chunks: Sequence[Buffer]
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    partition_leader_epoch: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    is_transactional: bool = False
    is_control: bool = False
    end_txn_marker: EndTransactionMarker | None = None


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """What a read_committed Fetch response lists per aborted transaction."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    num_messages: int
    valid_bytes: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    fetch_offset_metadata: LogOffsetMetadata
    records: Buffer
    aborted_transactions: Sequence[AbortedTransaction] | None = None
    """None unless the read was read_committed (Kafka's FetchDataInfo)."""

    @property
    def size(self) -> int:
        return len(self.records)


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int | None


class FetchIsolation(Enum):
    """How far a read may go: Kafka's FetchIsolation."""

    LOG_END = "log_end"  # followers
    HIGH_WATERMARK = "high_watermark"  # consumers, read_uncommitted
    TXN_COMMITTED = "txn_committed"  # consumers, read_committed (LSO)
