"""Reading a __consumer_offsets partition back into groups and offsets (Kafka's
CoordinatorLoaderImpl / GroupMetadataManager.doLoadGroupsAndOffsets).

The log is read on the event loop through ``UnifiedLog.read`` in ``offsets.load.buffer.size``
chunks of whole batches (a page-cache ``pread``); decompressing and decoding each chunk
runs in the executor, and folding the decoded records into the latest state per key is a
few dictionary operations back on the loop. Later records win; a tombstone removes its
key. Besides offsets and classic groups, a partition holds the records of KIP-848
consumer groups (`consumer_group_records`), kept per group as their latest value per key,
and transactional offset commits (TxnOffsetCommit), which wait for their producer's
COMMIT marker (then they count, unless a later commit of the partition is already in)
or ABORT marker (then they are dropped); those still waiting at the end stay pending.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.compression import decompress
from tiercel.protocol.end_txn_marker import read_end_txn_marker
from tiercel.protocol.record_batch import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, iter_batches
from tiercel.protocol.records import decode_records
from tiercel.server.coordinator.coordinator_log_replay import replay_log
from tiercel.server.coordinator.group.consumer_group_records import (
    ConsumerGroupKey,
    ConsumerGroupValue,
    decode_consumer_group_key,
    decode_consumer_group_value,
)
from tiercel.server.coordinator.group.coordinator_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from tiercel.server.coordinator.group.modern.consumer_group import LoadedConsumerGroup
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata
from tiercel.server.coordinator.group.txn_offsets import PendingOffsets
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.unified_log import UnifiedLog

_log: Final = logging.getLogger("tiercel.group_coordinator")


@dataclass(frozen=True, slots=True)
class LoadedRecord:
    """One decoded record; ``value`` None is a tombstone. Immutable; any thread."""

    offset: int
    key: OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey
    value: OffsetCommitValue | GroupMetadataValue | ConsumerGroupValue | None
    producer_id: int | None = None
    """The producer of a transactional offset commit (TxnOffsetCommit)."""


@dataclass(frozen=True, slots=True)
class LoadedTxnMarker:
    """A COMMIT or ABORT marker: the producer's transactional commits end here."""

    producer_id: int
    committed: bool


@dataclass(frozen=True, slots=True)
class ParsedChunk:
    """Records and markers of a chunk of whole batches, in log order, and where the
    next chunk starts."""

    records: list[LoadedRecord | LoadedTxnMarker]
    next_offset: int
    skipped: int
    """Records not loaded: unknown key versions, undecodable records."""


def parse_chunk(data: bytes) -> ParsedChunk:
    """Decode whole batches. Pure CPU: runs in the executor."""
    records: list[LoadedRecord | LoadedTxnMarker] = []
    next_offset = -1
    skipped = 0
    for pos, header in iter_batches(data):
        next_offset = header.next_offset
        end = pos + header.batch_length + LOG_OVERHEAD
        if header.is_control:
            marker = read_end_txn_marker(memoryview(data)[pos:end])
            if marker is not None:
                records.append(LoadedTxnMarker(header.producer_id, not marker.is_abort))
            continue
        producer_id = header.producer_id if header.is_transactional else None
        section = decompress(
            header.compression, memoryview(data)[pos + RECORD_BATCH_OVERHEAD : end]
        )
        for record in decode_records(section, header.records_count):
            offset = header.base_offset + record.offset_delta
            try:
                if record.key is None:
                    raise ValueError("the record has no key")
                loaded = _decode(offset, record.key, record.value, producer_id)
            except Exception as e:
                # One bad record must not cost the partition's other groups their
                # offsets: it is skipped and counted, like an unknown record type.
                log_event(
                    _log,
                    logging.ERROR,
                    "coordinator_record_undecodable",
                    offset=offset,
                    reason=repr(e),
                )
                loaded = None
            if loaded is None:
                skipped += 1
            else:
                records.append(loaded)
    return ParsedChunk(records, next_offset, skipped)


def _decode(
    offset: int, key_bytes: bytes, value_bytes: bytes | None, producer_id: int | None
) -> LoadedRecord | None:
    """The record, or None for a key type this broker does not know."""
    key = decode_key(key_bytes)
    if isinstance(key, UnknownKey):
        consumer_key = decode_consumer_group_key(key_bytes)
        if consumer_key is None:
            return None
        consumer_value = (
            None if value_bytes is None else decode_consumer_group_value(consumer_key, value_bytes)
        )
        return LoadedRecord(offset, consumer_key, consumer_value)
    value: OffsetCommitValue | GroupMetadataValue | None = None
    if value_bytes is not None:
        value = (
            decode_offset_commit_value(value_bytes)
            if isinstance(key, OffsetCommitKey)
            else decode_group_metadata_value(value_bytes)
        )
    return LoadedRecord(offset, key, value, producer_id)


@dataclass(slots=True)
class LoadedPartition:
    """The latest state per key of one partition.

    Invariants: a group is in at most one of ``groups`` and ``removed_groups``;
    ``classic_offsets`` holds the log offset of each group's latest GroupMetadata record.
    Event-loop only.
    """

    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    groups: dict[str, GroupMetadataValue] = field(default_factory=dict)
    removed_groups: set[str] = field(default_factory=set)
    consumer_groups: dict[str, LoadedConsumerGroup] = field(default_factory=dict)
    classic_offsets: dict[str, int] = field(default_factory=dict)
    pending_txn_offsets: PendingOffsets = field(default_factory=dict)
    """Transactional commits whose marker is not in the log (yet)."""
    skipped: int = 0

    def apply(self, records: list[LoadedRecord | LoadedTxnMarker]) -> None:
        for record in records:
            if isinstance(record, LoadedTxnMarker):
                self._end_txn(record)
                continue
            key = record.key
            value = record.value
            if isinstance(key, OffsetCommitKey) and record.producer_id is not None:
                if isinstance(record.value, OffsetCommitValue):
                    pending = self.pending_txn_offsets.setdefault(record.producer_id, {})
                    pending.setdefault(key.group, {})[TopicPartition(key.topic, key.partition)] = (
                        OffsetAndMetadata.from_value(record.value, record.offset)
                    )
            elif isinstance(key, OffsetCommitKey):
                tp = TopicPartition(key.topic, key.partition)
                group_offsets = self.offsets.setdefault(key.group, {})
                if isinstance(value, OffsetCommitValue):
                    group_offsets[tp] = OffsetAndMetadata.from_value(value, record.offset)
                else:
                    group_offsets.pop(tp, None)
                    if not group_offsets:
                        del self.offsets[key.group]
            elif isinstance(key, GroupMetadataKey):
                self.classic_offsets[key.group] = record.offset
                if isinstance(value, GroupMetadataValue):
                    self.removed_groups.discard(key.group)
                    self.groups[key.group] = value
                else:
                    self.groups.pop(key.group, None)
                    self.removed_groups.add(key.group)
            else:
                # A consumer group key always comes with a consumer group value.
                assert not isinstance(value, OffsetCommitValue | GroupMetadataValue)
                group = self.consumer_groups.setdefault(key.group, LoadedConsumerGroup())
                group.apply(key, value, record.offset)

    def _end_txn(self, marker: LoadedTxnMarker) -> None:
        pending = self.pending_txn_offsets.pop(marker.producer_id, {})
        if not marker.committed:
            return
        for group_id, offsets in pending.items():
            group_offsets = self.offsets.setdefault(group_id, {})
            for tp, offset in offsets.items():
                current = group_offsets.get(tp)
                if current is None or current.record_offset < offset.record_offset:
                    group_offsets[tp] = offset


async def load_partition(
    log: UnifiedLog,
    scheduler: Scheduler,
    buffer_size: int,
    still_wanted: Callable[[], bool],
) -> LoadedPartition | None:
    """Read ``log`` from its start to its current end; None if ``still_wanted`` turned
    false meanwhile (the partition moved away)."""
    loaded = LoadedPartition()
    return await replay_log(
        log,
        scheduler,
        buffer_size,
        still_wanted,
        parse_chunk,
        lambda chunk: loaded.apply(chunk.records),
        loaded,
    )
