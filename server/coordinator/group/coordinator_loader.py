"""Reading a __consumer_offsets partition back into groups and offsets (Kafka's
CoordinatorLoaderImpl / GroupMetadataManager.doLoadGroupsAndOffsets).

The log is read on the event loop through ``UnifiedLog.read`` in ``offsets.load.buffer.size``
chunks of whole batches (a page-cache ``pread``); decompressing and decoding each chunk
runs in the executor, and folding the decoded records into the latest state per key is a
few dictionary operations back on the loop. Later records win; a tombstone removes its
key. Besides offsets and classic groups, a partition holds the records of KIP-848
consumer groups (`consumer_group_records`), kept per group as their latest value per key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.compression import decompress
from tiercel.protocol.record_batch import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, iter_batches
from tiercel.protocol.records import decode_records
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
from tiercel.storage.log_values import FetchIsolation
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


@dataclass(frozen=True, slots=True)
class ParsedChunk:
    """Records of a chunk of whole batches, and where the next chunk starts."""

    records: list[LoadedRecord]
    next_offset: int
    skipped: int
    """Records not loaded: unknown key versions, undecodable records, transactional
    offset commits."""


def parse_chunk(data: bytes) -> ParsedChunk:
    """Decode whole batches. Pure CPU: runs in the executor.

    Control batches are skipped; so are transactional batches, which only
    TxnOffsetCommit writes and this broker does not accept yet."""
    records: list[LoadedRecord] = []
    next_offset = -1
    skipped = 0
    for pos, header in iter_batches(data):
        next_offset = header.next_offset
        if header.is_control:
            continue
        if header.is_transactional:
            skipped += header.records_count
            continue
        end = pos + header.batch_length + LOG_OVERHEAD
        section = decompress(
            header.compression, memoryview(data)[pos + RECORD_BATCH_OVERHEAD : end]
        )
        for record in decode_records(section, header.records_count):
            offset = header.base_offset + record.offset_delta
            try:
                if record.key is None:
                    raise ValueError("the record has no key")
                loaded = _decode(offset, record.key, record.value)
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


def _decode(offset: int, key_bytes: bytes, value_bytes: bytes | None) -> LoadedRecord | None:
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
    return LoadedRecord(offset, key, value)


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
    skipped: int = 0

    def apply(self, records: list[LoadedRecord]) -> None:
        for record in records:
            key = record.key
            value = record.value
            if isinstance(key, OffsetCommitKey):
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


async def load_partition(
    log: UnifiedLog,
    scheduler: Scheduler,
    buffer_size: int,
    still_wanted: Callable[[], bool],
) -> LoadedPartition | None:
    """Read ``log`` from its start to its current end; None if ``still_wanted`` turned
    false meanwhile (the partition moved away)."""
    loaded = LoadedPartition()
    offset = log.log_start_offset
    end = log.log_end_offset
    while offset < end:
        if not still_wanted():
            return None
        info = log.read(offset, buffer_size, FetchIsolation.LOG_END, True)
        if not info.records:
            break
        chunk = await scheduler.run_blocking(parse_chunk, bytes(info.records))
        if chunk.next_offset <= offset:
            break
        loaded.apply(chunk.records)
        loaded.skipped += chunk.skipped
        offset = chunk.next_offset
    return loaded if still_wanted() else None
