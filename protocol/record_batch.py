"""RecordBatch v2 (magic 2): the header view, CRC, in-place rewrites and batch scanning.

Byte layout, exactly as Kafka writes it to the wire and to `.log` segments (big-endian):

    offset  size  field
         0     8  baseOffset            int64
         8     4  batchLength           int32   bytes after this field (total size - 12)
        12     4  partitionLeaderEpoch  int32   \\ outside the CRC: the broker rewrites
                                                / baseOffset and this without re-hashing
        16     1  magic                 int8    2
        17     4  crc                   uint32  CRC-32C of bytes [21, end)
        21     2  attributes            int16   bits 0-2 compression codec, 3 timestamp
                                                type, 4 transactional, 5 control,
                                                6 delete horizon (baseTimestamp holds it)
        23     4  lastOffsetDelta       int32
        27     8  baseTimestamp         int64
        35     8  maxTimestamp          int64
        43     8  producerId            int64
        51     2  producerEpoch         int16
        53     4  baseSequence          int32
        57     4  recordsCount          int32
        61     -  records               see protocol.records; compressed as one blob
                                        when the codec bits are non-zero

A segment file or a produce request's records field is such batches back to back.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple, TypeAlias

import crc32c

from tiercel.protocol.errors import CorruptRecordError

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "BATCH_LENGTH_OFFSET",
    "COMPRESSION_CODEC_MASK",
    "CONTROL_FLAG_MASK",
    "CRC_OFFSET",
    "DELETE_HORIZON_FLAG_MASK",
    "LAST_OFFSET_DELTA_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAGIC_V2",
    "MAX_TIMESTAMP_OFFSET",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORDS_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_FLAG_MASK",
    "BatchScan",
    "ReadableBuffer",
    "RecordBatchHeader",
    "TimestampType",
    "WritableBuffer",
    "compute_attributes",
    "compute_crc",
    "is_crc_valid",
    "iter_batches",
    "patched_header_prefix",
    "patched_timestamp_prefix",
    "read_header",
    "read_size_prefix",
    "scan_batches",
    "set_base_offset",
    "set_max_timestamp_and_crc",
    "set_partition_leader_epoch",
]

ReadableBuffer: TypeAlias = bytes | bytearray | memoryview
WritableBuffer: TypeAlias = bytearray | memoryview

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

RECORD_BATCH_OVERHEAD = 61
# baseOffset + batchLength: the part of a batch that batchLength does not count.
LOG_OVERHEAD = 12
MAGIC_V2 = 2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40
# Kafka recomputes attributes from the known flags when it rewrites them, which clears
# any undefined bit; the in-place rewrite does the same to stay byte-identical.
_KNOWN_ATTRIBUTE_BITS = 0x7F

_HEADER = struct.Struct(">qiibIhiqqqhii")
_SIZE_PREFIX = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
# baseOffset .. crc: everything before the CRC-covered region.
_PREFIX_21 = struct.Struct(">qiibI")
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp: the CRC-covered bytes that a
# timestamp rewrite touches.
_CRC_HEAD_22 = struct.Struct(">hiqq")
_INT32_MAX = (1 << 31) - 1


class TimestampType(IntEnum):
    """The attributes' timestamp-type bit (Kafka's TimestampType for magic >= 1)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class RecordBatchHeader(NamedTuple):
    """The 61-byte header of one batch, parsed by a single `struct.unpack_from`.

    A plain value (no reference to the buffer it came from); thread-safe. Fields are as
    stored: nothing is validated beyond there being 61 bytes to read.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        """The codec id (0-7); see protocol.compression.CompressionType."""
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """True when baseTimestamp holds the compaction delete horizon (KIP-534)."""
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap from Int32.MAX to 0 as in Kafka."""
        base = self.base_sequence
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        delta = self.last_offset_delta
        if base > _INT32_MAX - delta:
            return delta - (_INT32_MAX - base) - 1
        return base + delta

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD


_make_header = RecordBatchHeader._make


def read_header(buf: ReadableBuffer, pos: int = 0) -> RecordBatchHeader:
    """Parse the header of the batch at `pos`; raises CorruptRecordError if < 61 bytes remain."""
    if len(buf) - pos < RECORD_BATCH_OVERHEAD or pos < 0:
        raise CorruptRecordError(
            f"Record batch header at position {pos} is truncated: "
            f"{max(len(buf) - pos, 0)} bytes remain, {RECORD_BATCH_OVERHEAD} needed"
        )
    return _make_header(_HEADER.unpack_from(buf, pos))


def read_size_prefix(buf: ReadableBuffer, pos: int) -> tuple[int, int]:
    """(baseOffset, batchLength) of the batch at `pos`: the 12 bytes a file scan needs.

    Raises CorruptRecordError if fewer than 12 bytes remain.
    """
    if len(buf) - pos < LOG_OVERHEAD or pos < 0:
        raise CorruptRecordError(f"Record batch size prefix at position {pos} is truncated")
    base_offset, batch_length = _SIZE_PREFIX.unpack_from(buf, pos)
    return base_offset, batch_length


def compute_attributes(
    compression: int,
    timestamp_type: TimestampType,
    *,
    is_transactional: bool = False,
    is_control: bool = False,
    has_delete_horizon: bool = False,
) -> int:
    """The attributes int16 for these flags (Kafka's DefaultRecordBatch.computeAttributes)."""
    attributes = compression & COMPRESSION_CODEC_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_FLAG_MASK
    return attributes


def compute_crc(buf: ReadableBuffer, pos: int, size: int) -> int:
    """CRC-32C over attributes..end of the `size`-byte batch at `pos`, without copying."""
    return int(crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]))


def is_crc_valid(buf: ReadableBuffer, pos: int, header: RecordBatchHeader) -> bool:
    """True if the stored CRC matches; False also when the batch runs past `buf`."""
    size = header.batch_length + LOG_OVERHEAD
    if size < RECORD_BATCH_OVERHEAD or pos + size > len(buf):
        return False
    return compute_crc(buf, pos, size) == header.crc


# --- in-place rewrites ----------------------------------------------------------------


def set_base_offset(buf: WritableBuffer, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset (outside the CRC, so no re-hash)."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: WritableBuffer, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch (outside the CRC, so no re-hash)."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp_and_crc(
    buf: WritableBuffer, pos: int, timestamp_type: TimestampType, max_timestamp: int
) -> None:
    """Kafka's DefaultRecordBatch.setMaxTimestamp on the batch at `pos`.

    Sets the timestamp-type bit and maxTimestamp and recomputes the CRC; leaves the batch
    untouched when both already hold these values. baseTimestamp and the records keep
    their create times: consumers take every record's time from maxTimestamp when the
    type is LOG_APPEND_TIME.
    """
    header = read_header(buf, pos)
    if header.timestamp_type == timestamp_type and header.max_timestamp == max_timestamp:
        return
    attributes = _timestamp_attributes(header.attributes, timestamp_type)
    _CRC_HEAD_22.pack_into(
        buf,
        pos + ATTRIBUTES_OFFSET,
        attributes,
        header.last_offset_delta,
        header.base_timestamp,
        max_timestamp,
    )
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, header.size_in_bytes))


def _timestamp_attributes(attributes: int, timestamp_type: TimestampType) -> int:
    attributes &= _KNOWN_ATTRIBUTE_BITS & ~TIMESTAMP_TYPE_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    return attributes


# --- zero-copy rewrites for os.writev([prefix, view[len(prefix):]]) -------------------


def patched_header_prefix(
    view: ReadableBuffer, base_offset: int, partition_leader_epoch: int
) -> bytes:
    """The batch's first 21 bytes with baseOffset and partitionLeaderEpoch replaced.

    `prefix + view[21:size]` equals the batch after `set_base_offset` and
    `set_partition_leader_epoch`; the CRC is unaffected. Raises CorruptRecordError if
    fewer than 21 bytes are given.
    """
    if len(view) < ATTRIBUTES_OFFSET:
        raise CorruptRecordError("Record batch header is truncated")
    _, batch_length, _, magic, crc = _PREFIX_21.unpack_from(view, 0)
    return _PREFIX_21.pack(base_offset, batch_length, partition_leader_epoch, magic, crc)


def patched_timestamp_prefix(
    view: ReadableBuffer,
    base_offset: int,
    partition_leader_epoch: int,
    timestamp_type: TimestampType,
    max_timestamp: int,
) -> bytes:
    """The batch's first 43 bytes as `set_max_timestamp_and_crc` plus the offset/epoch
    rewrites would leave them, for `os.writev([prefix, view[43:size]])`.

    The new CRC is computed by continuing CRC-32C from the patched bytes 21..43 over the
    untouched rest of the batch, so the records are never copied. `view` starts at the
    batch; its batchLength field bounds the CRC. Raises CorruptRecordError if `view` is
    shorter than the batch.
    """
    header = read_header(view, 0)
    size = header.batch_length + LOG_OVERHEAD
    if size < RECORD_BATCH_OVERHEAD or size > len(view):
        raise CorruptRecordError(
            f"Record batch size {size} does not fit the {len(view)} bytes given"
        )
    if header.timestamp_type == timestamp_type and header.max_timestamp == max_timestamp:
        crc = header.crc
        covered = bytes(view[ATTRIBUTES_OFFSET:PRODUCER_ID_OFFSET])
    else:
        attributes = _timestamp_attributes(header.attributes, timestamp_type)
        covered = _CRC_HEAD_22.pack(
            attributes, header.last_offset_delta, header.base_timestamp, max_timestamp
        )
        rest = memoryview(view)[PRODUCER_ID_OFFSET:size]
        crc = crc32c.crc32c(rest, crc32c.crc32c(covered))
    prefix = _PREFIX_21.pack(
        base_offset, header.batch_length, partition_leader_epoch, header.magic, crc
    )
    return prefix + covered


# --- walking concatenated batches -----------------------------------------------------


def iter_batches(
    buf: ReadableBuffer, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, RecordBatchHeader]]:
    """Yield (position, header) for each batch in `buf[pos:end]`, back to back.

    Stops cleanly at `end`. Raises CorruptRecordError when a batch is shorter than the
    61-byte header, or its batchLength runs past `end` (a truncated tail included); CRC
    and magic are the caller's to check.
    """
    limit = len(buf) if end is None else min(end, len(buf))
    unpack = _HEADER.unpack_from
    make = _make_header
    while pos < limit:
        if limit - pos < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"Truncated record batch at position {pos}: {limit - pos} bytes left, "
                f"smaller than the {RECORD_BATCH_OVERHEAD}-byte header"
            )
        header = make(unpack(buf, pos))
        size = header.batch_length + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"Record batch at position {pos} is corrupt (the size {size} is smaller than "
                f"the minimum allowed overhead {RECORD_BATCH_OVERHEAD})"
            )
        if pos + size > limit:
            raise CorruptRecordError(
                f"Truncated record batch at position {pos}: size {size} but only "
                f"{limit - pos} bytes left"
            )
        yield pos, header
        pos += size


@dataclass(frozen=True, slots=True)
class BatchScan:
    """Result of `scan_batches`: the longest prefix of whole, CRC-valid v2 batches.

    Invariants: `valid_bytes` counts from the scan start and ends at a batch boundary;
    `first`/`last` are None iff `batch_count == 0`; `invalid_position` (absolute) and
    `invalid_reason` are both None iff the scan reached its end cleanly, else the
    position equals start + valid_bytes. `max_timestamp` is NO_TIMESTAMP when no batch
    carries one, and `offset_of_max_timestamp` is then -1; otherwise it is the last
    offset of the first batch with that max timestamp (as Kafka's segment recovery
    feeds the time index). Thread-safe value.
    """

    valid_bytes: int
    batch_count: int
    first: RecordBatchHeader | None
    last: RecordBatchHeader | None
    max_timestamp: int
    offset_of_max_timestamp: int
    invalid_position: int | None
    invalid_reason: str | None


def scan_batches(buf: ReadableBuffer, pos: int = 0, end: int | None = None) -> BatchScan:
    """Find the end of the last complete, CRC-valid magic-2 batch in `buf[pos:end]`.

    Log recovery truncates the segment to `pos + valid_bytes`. Never raises on bad data:
    the first problem (truncated tail, impossible size, wrong magic, CRC mismatch) is
    reported in `invalid_reason`. Cost is one CRC pass over the region; run it off the
    event loop for whole segments.
    """
    limit = len(buf) if end is None else min(end, len(buf))
    start = pos
    count = 0
    first: RecordBatchHeader | None = None
    last: RecordBatchHeader | None = None
    max_timestamp = NO_TIMESTAMP
    offset_of_max = -1
    reason: str | None = None
    while pos < limit:
        remaining = limit - pos
        if remaining < RECORD_BATCH_OVERHEAD:
            reason = f"truncated: {remaining} bytes left, smaller than a batch header"
            break
        header = _make_header(_HEADER.unpack_from(buf, pos))
        reason = _batch_problem(buf, pos, remaining, header)
        if reason is not None:
            break
        if first is None:
            first = header
        last = header
        count += 1
        if header.max_timestamp > max_timestamp:
            max_timestamp = header.max_timestamp
            offset_of_max = header.base_offset + header.last_offset_delta
        pos += header.batch_length + LOG_OVERHEAD
    return BatchScan(
        valid_bytes=pos - start,
        batch_count=count,
        first=first,
        last=last,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max,
        invalid_position=None if reason is None else pos,
        invalid_reason=reason,
    )


def _batch_problem(
    buf: ReadableBuffer, pos: int, remaining: int, header: RecordBatchHeader
) -> str | None:
    """Why the batch at `pos` is not a whole, valid v2 batch, or None if it is."""
    size = header.batch_length + LOG_OVERHEAD
    if size < RECORD_BATCH_OVERHEAD:
        return f"corrupt: size {size} is smaller than the {RECORD_BATCH_OVERHEAD}-byte header"
    if size > remaining:
        return f"truncated: batch size {size}, only {remaining} bytes left"
    if header.magic != MAGIC_V2:
        return f"corrupt: magic {header.magic}, expected {MAGIC_V2}"
    computed = compute_crc(buf, pos, size)
    if computed != header.crc:
        return f"corrupt: stored crc = {header.crc}, computed crc = {computed}"
    return None
