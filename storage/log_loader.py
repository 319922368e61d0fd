"""Loading a partition directory into a `UnifiedLog`, recovering it after a crash.

*Blocking*: the whole module runs in an executor thread (the LogManager loads many
partitions in parallel, ``num.recovery.threads.per.data.dir`` per log dir).

What happens, as in Kafka's ``LogLoader.load`` (the log end offset comes from the
segments themselves, it is never stored):

1. Leftovers of interrupted operations are removed: ``.deleted`` and ``.cleaned`` files,
   and index files whose log file is gone. A cleaning that crashed after renaming its
   segment ``.swap`` is completed, as Kafka's LogLoader does: the segments it replaces
   (files named in the range from the swap segment's base offset to its next offset)
   are deleted and the ``.swap`` files take their final names.
2. Each ``.log`` file becomes a `LogSegment`.
3. After an unclean shutdown every segment from the one holding the recovery point on is
   scanned batch by batch with CRC checks: indexes are rebuilt and a torn or corrupt
   tail is truncated; once a segment had to be truncated, every later segment is
   deleted (nothing after a hole can be trusted). The transaction indexes of the
   recovered segments are rebuilt by replaying the producer state over them. After a
   clean shutdown only the index sanity checks run, and a missing or corrupt index
   triggers the same rebuild.
4. The leader-epoch cache is loaded, completed from the recovered batches, then
   truncated to the log's offset range.
5. The producer state is rebuilt: the latest ``<offset>.snapshot`` at or below the log
   end is loaded and the batches after it are replayed (`storage.producer_state_loader`);
   snapshots matching no segment (but the newest, written at a clean shutdown) go.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Final

from tiercel.config.log_config import LogConfig
from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import KafkaError
from tiercel.protocol.record_batch import RECORD_BATCH_OVERHEAD, read_header
from tiercel.storage.checkpoint_file import (
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    PARTITION_METADATA_FILENAME,
    LeaderEpochCheckpointFile,
    PartitionMetadataFile,
)
from tiercel.storage.file_names import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    offset_from_file_name,
)
from tiercel.storage.leader_epoch_cache import LeaderEpochFileCache
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, ProducerStateManager
from tiercel.storage.producer_state_loader import rebuild_producer_state, rebuild_txn_indexes
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.log")

_SEGMENT_FILE_SUFFIXES: Final = (
    LOG_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
)


@dataclass(slots=True)
class LoadedLog:
    """What `load_partition_dir` recovered; the LogManager turns it into a `UnifiedLog`."""

    directory: str
    topic_partition: TopicPartition
    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    leader_epoch_cache: LeaderEpochFileCache
    topic_id: uuid.UUID | None
    recovered_bytes_truncated: int
    producer_state: ProducerStateManager


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """``<topic>-<partition>``; topic names may themselves contain dashes."""
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not partition.isdigit():
        return None
    return TopicPartition(topic, int(partition))


def load_partition_dir(
    directory: str,
    config: LogConfig,
    recovery_point: int,
    log_start_offset: int,
    clean_shutdown: bool,
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    remote_log_enabled: bool = False,
) -> LoadedLog:
    name = os.path.basename(directory)
    topic_partition = parse_partition_dir_name(name)
    if topic_partition is None:
        raise ValueError(f"{directory} is not a partition directory")
    _remove_leftovers(directory)
    epoch_cache = LeaderEpochFileCache(
        topic_partition,
        LeaderEpochCheckpointFile(os.path.join(directory, LEADER_EPOCH_CHECKPOINT_FILENAME)),
    )
    segments = _open_segments(directory, config)
    recovered: list[LogSegment] = []
    truncated = _recover(segments, recovery_point, clean_shutdown, epoch_cache, recovered)
    if not segments:
        start = max(log_start_offset, 0)
        segments = [
            LogSegment(directory, start, config.index_interval_bytes, config.segment_index_bytes)
        ]
    log_end_offset = segments[-1].next_offset()
    if not remote_log_enabled:
        # Only the remote tier holds offsets below the first local segment (Kafka's
        # LogLoader keeps the checkpointed log start offset when remote is enabled).
        log_start_offset = max(log_start_offset, segments[0].base_offset)
    log_start_offset = min(log_start_offset, log_end_offset)
    epoch_cache.truncate_from_end(log_end_offset)
    epoch_cache.truncate_from_start(log_start_offset)
    epoch_cache.flush()
    topic_id = PartitionMetadataFile(os.path.join(directory, PARTITION_METADATA_FILENAME)).read()
    if clean_shutdown:
        recovery_point = max(recovery_point, log_end_offset)
    now = int(time.time() * 1000)
    rebuild_txn_indexes(
        ProducerStateManager(topic_partition, directory, producer_id_expiration_ms),
        segments,
        [segment for segment in recovered if segment in segments],
        log_start_offset,
        now,
    )
    producer_state = ProducerStateManager(topic_partition, directory, producer_id_expiration_ms)
    producer_state.remove_stray_snapshots(segment.base_offset for segment in segments)
    rebuild_producer_state(
        producer_state,
        segments,
        log_start_offset,
        log_end_offset,
        clean_shutdown,
        now,
    )
    return LoadedLog(
        directory,
        topic_partition,
        segments,
        log_start_offset,
        min(recovery_point, log_end_offset),
        epoch_cache,
        topic_id,
        truncated,
        producer_state,
    )


def _remove_leftovers(directory: str) -> None:
    for name in os.listdir(directory):
        if name.endswith((DELETED_FILE_SUFFIX, CLEANED_FILE_SUFFIX, ".tmp")):
            os.remove(os.path.join(directory, name))
    _complete_swaps(directory)
    names = set(os.listdir(directory))
    logs = {n[: -len(LOG_FILE_SUFFIX)] for n in names if n.endswith(LOG_FILE_SUFFIX)}
    for name in names:
        if (
            name.endswith((INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX))
            and name.rsplit(".", 1)[0] not in logs
        ):
            os.remove(os.path.join(directory, name))


def _complete_swaps(directory: str) -> None:
    """Finish a segment swap the cleaner was interrupted in (see the module docstring).

    The cleaner renames a segment's log file ``.swap`` before its indexes, and the old
    segments ``.deleted`` before any ``.swap`` loses its suffix; so an index ``.swap``
    without its log ``.swap`` belongs to a log already renamed. Besides Kafka's range,
    the old files named after a swap segment's own base offset go too: an emptied
    segment has an empty range, and its old index must not pair with the new log."""
    names = sorted(os.listdir(directory))
    swaps = [n for n in names if n.endswith(SWAP_FILE_SUFFIX)]
    log_swaps = [n for n in swaps if n.endswith(LOG_FILE_SUFFIX + SWAP_FILE_SUFFIX)]
    if log_swaps:
        bases = {offset_from_file_name(n) for n in log_swaps}
        low = min(bases)
        high = max(
            _next_offset(os.path.join(directory, n), offset_from_file_name(n)) for n in log_swaps
        )
        for name in names:
            if name.endswith(_SEGMENT_FILE_SUFFIXES):
                offset = offset_from_file_name(name)
                if low <= offset < high or offset in bases:
                    log_event(_log, logging.INFO, "replaced_segment_file_deleted", file=name)
                    os.remove(os.path.join(directory, name))
    for name in swaps:
        log_event(_log, logging.INFO, "interrupted_swap_completed", file=name)
        path = os.path.join(directory, name)
        os.replace(path, path.removesuffix(SWAP_FILE_SUFFIX))


def _next_offset(path: str, base_offset: int) -> int:
    """One past the last offset of the complete batches in a segment file (its base
    offset when it has none), from the batch headers alone."""
    next_offset = base_offset
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        position = 0
        while position + RECORD_BATCH_OVERHEAD <= size:
            header = read_header(os.pread(f.fileno(), RECORD_BATCH_OVERHEAD, position))
            batch_size = header.size_in_bytes
            if batch_size < RECORD_BATCH_OVERHEAD or position + batch_size > size:
                break
            next_offset = header.next_offset
            position += batch_size
    return next_offset


def _open_segments(directory: str, config: LogConfig) -> list[LogSegment]:
    segments = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(LOG_FILE_SUFFIX):
            continue
        segments.append(
            LogSegment(
                directory,
                offset_from_file_name(name),
                config.index_interval_bytes,
                config.segment_index_bytes,
                file_exists=True,
            )
        )
    return segments


def _recover(
    segments: list[LogSegment],
    recovery_point: int,
    clean_shutdown: bool,
    epoch_cache: LeaderEpochFileCache,
    recovered: list[LogSegment],
) -> int:
    """Recover segments in place, adding them to ``recovered``; returns the bytes
    truncated. Deletes, from ``segments`` and from disk, every segment after one that
    had to be truncated."""
    total_truncated = 0
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        unflushed = next_base is None or next_base > recovery_point
        if clean_shutdown or not unflushed:
            if _indexes_sane(segment):
                segment.load_largest_timestamp()
                continue
            log_event(_log, logging.WARNING, "index_rebuild", segment=segment.log_path)
        truncated = segment.recover(epoch_cache)
        recovered.append(segment)
        if truncated:
            total_truncated += truncated
            log_event(
                _log,
                logging.WARNING,
                "torn_tail_truncated",
                segment=segment.log_path,
                bytes_truncated=truncated,
                valid_bytes=segment.size,
            )
            for later in segments[i + 1 :]:
                log_event(
                    _log,
                    logging.WARNING,
                    "segment_after_corruption_deleted",
                    segment=later.log_path,
                    size=later.size,
                )
                for path in later.rename_to_deleted():
                    os.remove(path)
            del segments[i + 1 :]
            break
    return total_truncated


def _indexes_sane(segment: LogSegment) -> bool:
    if segment.size > 0 and not segment.index_files_existed:
        return False
    try:
        segment.offset_index.sanity_check()
        segment.time_index.sanity_check()
        segment.txn_index.sanity_check()
    except KafkaError:
        return False
    return True
