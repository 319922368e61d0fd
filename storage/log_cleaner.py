"""LogCleaner: compacts the logs with ``cleanup.policy=compact`` in the background
(Kafka's LogCleaner and its cleaner threads).

Each of ``log.cleaner.threads`` workers repeatedly takes the filthiest compacted log
(`log_cleaner_manager`), cleans it, and sleeps ``log.cleaner.backoff.ms`` when no log
qualifies. A round builds its key -> offset map and writes the cleaned segments in the
cleaner's own executor threads (`cleaner`); the workers themselves are tasks on the
event loop, where the round is chosen and each cleaned segment is swapped in
(`replace_segments`), which refuses when the log changed meanwhile. Each
worker has its own `OffsetMap` of ``log.cleaner.dedupe.buffer.size / threads`` bytes.

After a round the log's first dirty offset — the round's end — goes to the log dir's
``cleaner-offset-checkpoint`` (Kafka's format, written like every checkpoint: temp
file, fsync, rename); a log truncated since is all dirty again. A round that fails on
bad data marks its partition uncleanable until the broker restarts, as Kafka does; one
aborted by shutdown or by the deletion of its partition removes its ``.cleaned`` files,
and so does the next start after a crash.

Contract: event-loop only; the executor work touches no loop state.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.config_def import ConfigError
from tiercel.config.logging_setup import log_event
from tiercel.storage.checkpoint_file import CLEANER_OFFSET_CHECKPOINT_FILENAME, OffsetCheckpointFile
from tiercel.storage.cleaned_transactions import CleanedTransactions
from tiercel.storage.cleaner import (
    AbortedRanges,
    CleaningRound,
    LastRecord,
    LogCleaningAbortedError,
    SegmentSource,
    clean_segments,
    discard_segment,
    map_segment,
)
from tiercel.storage.log_cleaner_manager import (
    LogToClean,
    grab_filthiest_compacted_log,
    group_segments_by_size,
    segments_between,
)
from tiercel.storage.log_segment import LogSegment
from tiercel.storage.offset_map import OffsetMap
from tiercel.storage.scheduler import CoalescingWriter, Scheduler
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.unified_log import UnifiedLog

__all__ = ["CleanResult", "CleanerConfig", "LogCleaner"]

T = TypeVar("T")
_log: Final = logging.getLogger("tiercel.log_cleaner")
# A map must hold at least this many keys of this size, or no round makes progress.
_MIN_MAP_KEYS: Final = 2
_TYPICAL_KEY_SIZE: Final = 64


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker settings the cleaner reads (Kafka's CleanerConfig). Immutable."""

    enable: bool = True
    threads: int = 1
    backoff_ms: int = 15_000
    dedupe_buffer_size: int = 128 * 1024 * 1024

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> CleanerConfig:
        return cls(
            config.log_cleaner_enable,
            config.log_cleaner_threads,
            config.log_cleaner_backoff_ms,
            config.log_cleaner_dedupe_buffer_size,
        )

    @property
    def map_memory_per_thread(self) -> int:
        return self.dedupe_buffer_size // max(self.threads, 1)


@dataclass(frozen=True, slots=True)
class CleanResult:
    """A completed round: the new first dirty offset and the cleaned segments' sizes."""

    end_offset: int
    bytes_before: int
    bytes_after: int


class LogCleaner:
    """Invariants: a partition is in at most one round at a time (``_in_progress``
    holds the abort flag of each running round); ``_checkpoints`` holds the first dirty
    offset of every partition cleaned or reset so far, and each log dir's file is
    rewritten after a change to one of its partitions."""

    def __init__(
        self,
        config: CleanerConfig,
        log_dirs: Sequence[str],
        logs: Mapping[TopicPartition, UnifiedLog],
        scheduler: Scheduler,
    ) -> None:
        if not OffsetMap(config.map_memory_per_thread).can_hold(_MIN_MAP_KEYS, _TYPICAL_KEY_SIZE):
            raise ConfigError(
                f"log.cleaner.dedupe.buffer.size {config.dedupe_buffer_size} is too small for "
                f"{config.threads} cleaner threads: increase it or decrease log.cleaner.threads",
                "log.cleaner.dedupe.buffer.size",
            )
        self.config = config
        self._logs = logs
        self._scheduler = scheduler
        self._files = {
            d: OffsetCheckpointFile(os.path.join(d, CLEANER_OFFSET_CHECKPOINT_FILENAME))
            for d in log_dirs
        }
        self._writers = {
            d: CoalescingWriter(scheduler, self._snapshot_of(d), f.write, f.path)
            for d, f in self._files.items()
        }
        self._written: set[str] = set()
        self._checkpoints: dict[TopicPartition, int] = {}
        # The log and its truncation count when its checkpoint was last set.
        self._marks: dict[TopicPartition, tuple[UnifiedLog, int]] = {}
        self._in_progress: dict[TopicPartition, threading.Event] = {}
        self._uncleanable: set[TopicPartition] = set()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(config.threads, 1), thread_name_prefix="tiercel-cleaner"
        )
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle ---------------------------------------------------------------------

    async def startup(self) -> None:
        """Read the checkpoints and, when enabled, start the workers."""
        for checkpoint in self._files.values():
            self._checkpoints.update(await self._scheduler.run_blocking(checkpoint.read))
        if not self.config.enable:
            return
        loop = asyncio.get_running_loop()
        for i in range(self.config.threads):
            offset_map = OffsetMap(self.config.map_memory_per_thread)
            self._tasks.append(loop.create_task(self._work(offset_map), name=f"log-cleaner-{i}"))
        log_event(_log, logging.INFO, "log_cleaner_started", threads=self.config.threads)

    async def shutdown(self) -> None:
        """Abort the running rounds, wait for the workers, write the checkpoints."""
        self._stopping.set()
        for abort in self._in_progress.values():
            abort.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for path in sorted(self._written):
            await self._writers[path].flush()
        self._executor.shutdown(wait=False)  # idle: every round has returned

    def remove_partition(self, tp: TopicPartition) -> None:
        """The partition's log is deleted: abort its round and forget its checkpoint."""
        abort = self._in_progress.get(tp)
        if abort is not None:
            abort.set()
        self._uncleanable.discard(tp)
        self._marks.pop(tp, None)
        if self._checkpoints.pop(tp, None) is not None:
            for path in self._files:
                self._request_write(path)

    def maybe_truncate_checkpoint(self, tp: TopicPartition, offset: int) -> None:
        """The partition's log was truncated: a first dirty offset beyond ``offset``
        (the new active segment's base) moves back to it, as Kafka's
        LogCleanerManager.maybeTruncateCheckpoint, so what is appended again is dirty."""
        checkpoint = self._checkpoints.get(tp)
        if checkpoint is not None and checkpoint > offset:
            self._set_checkpoint(tp, offset)

    @property
    def checkpoints(self) -> Mapping[TopicPartition, int]:
        """First dirty offset by partition, as ``cleaner-offset-checkpoint`` has them."""
        return self._checkpoints

    # -- rounds ------------------------------------------------------------------------

    async def _work(self, offset_map: OffsetMap) -> None:
        backoff_s = max(self.config.backoff_ms, 1) / 1000
        while not self._stopping.is_set():
            try:
                cleaned = await self.clean_filthiest_log(offset_map)
            except Exception as e:  # choosing failed: keep the cleaner alive, back off
                log_event(_log, logging.ERROR, "log_cleaner_failed", reason=repr(e))
                cleaned = False
            if not cleaned:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(backoff_s):  # keeps cancellation
                        await self._stopping.wait()

    async def clean_filthiest_log(self, offset_map: OffsetMap) -> bool:
        """Clean the filthiest compacted log, if one qualifies; True if a round
        completed."""
        now = _now_ms()
        for tp, (log, truncations) in list(self._marks.items()):
            if log.truncations != truncations and tp not in self._in_progress:
                # Truncated without the LogManager telling (`maybe_truncate_checkpoint`):
                # the truncation point is not known here, so clean it all again.
                self._set_checkpoint(tp, log.log_start_offset)
        excluded = self._in_progress.keys() | self._uncleanable
        chosen, resets = grab_filthiest_compacted_log(
            self._logs.values(), self._checkpoints, excluded, now
        )
        for tp, offset in resets.items():
            self._set_checkpoint(tp, offset)
        if chosen is None or self._stopping.is_set():
            return False
        tp = chosen.log.topic_partition
        abort = threading.Event()
        self._in_progress[tp] = abort
        started = time.monotonic()
        try:
            result = await self.clean_log(chosen, offset_map, now, abort)
        except LogCleaningAbortedError:
            return False
        except Exception as e:
            if not chosen.log.deleted:
                self._uncleanable.add(tp)
                log_event(
                    _log, logging.ERROR, "log_cleaning_failed", partition=str(tp), reason=repr(e)
                )
            return False
        finally:
            del self._in_progress[tp]
        if result is None:
            return False
        self._set_checkpoint(tp, result.end_offset)
        log_event(
            _log,
            logging.INFO,
            "log_cleaned",
            partition=str(tp),
            first_dirty_offset=chosen.first_dirty_offset,
            end_offset=result.end_offset,
            bytes_before=result.bytes_before,
            bytes_after=result.bytes_after,
            keys=offset_map.size,
            elapsed_ms=int((time.monotonic() - started) * 1000),
        )
        return True

    async def clean_log(
        self, to_clean: LogToClean, offset_map: OffsetMap, now_ms: int, abort: threading.Event
    ) -> CleanResult | None:
        """One round over ``to_clean``, which must have cleanable bytes; None when the log
        changed under it (truncated, or segments deleted): nothing after that point is
        swapped in, and the round is abandoned."""
        if to_clean.cleanable_bytes <= 0:
            raise ValueError(f"nothing to clean in {to_clean.log.topic_partition}")
        log = to_clean.log
        truncations = log.truncations
        upper_bound = to_clean.first_uncleanable_offset
        segments = segments_between(log, -1, upper_bound)
        # Every aborted transaction with data in the range: their markers may lie
        # beyond it (Kafka's collectAbortedTransactions over the cleaned range).
        aborted_txns = log.local_log.collect_aborted_transactions(
            segments[0].base_offset if segments else upper_bound, upper_bound
        )
        aborted = AbortedRanges(aborted_txns)
        end_offset = await self._build_offset_map(to_clean, offset_map, aborted, truncations, abort)
        if end_offset is None:
            self._abandoned(log)
            return None
        config = log.config
        cleaning = CleaningRound(
            offset_map,
            now_ms,
            config.delete_retention_ms,
            upper_bound,
            {
                producer_id: LastRecord(
                    entry.last_data_offset if entry.last_data_offset >= 0 else None,
                    entry.producer_epoch,
                )
                for producer_id, entry in log.producer_state.active_producers.items()
            },
            # The cleaning walk starts at the log start: a fresh view of every
            # transaction of the range (Kafka's doClean makes one per round).
            CleanedTransactions(aborted_txns),
        )
        groups = group_segments_by_size(
            [s for s in segments if s.base_offset < end_offset],
            config.segment_bytes,
            config.segment_index_bytes,
            upper_bound,
        )
        sizes = await self._clean_groups(log, groups, cleaning, truncations, abort)
        if sizes is None:
            self._abandoned(log)
            return None
        return CleanResult(end_offset, *sizes)

    async def _clean_groups(
        self,
        log: UnifiedLog,
        groups: Sequence[Sequence[LogSegment]],
        cleaning: CleaningRound,
        truncations: int,
        abort: threading.Event,
    ) -> tuple[int, int] | None:
        """Clean each group into one segment and swap it in; the bytes before and
        after, or None once a group is no longer the log's."""
        config = log.config
        bytes_before = bytes_after = 0
        for group in groups:
            cleaned = await self._on_sources(
                log,
                group,
                truncations,
                clean_segments,
                log.dir,
                cleaning,
                config.index_interval_bytes,
                config.segment_index_bytes,
                abort,
            )
            if cleaned is None:
                return None
            if not replace_segments(log, cleaned, group, truncations):
                await self._run(discard_segment, cleaned)
                return None
            bytes_before += sum(s.size for s in group)
            bytes_after += cleaned.size
        return bytes_before, bytes_after

    async def _build_offset_map(
        self,
        to_clean: LogToClean,
        offset_map: OffsetMap,
        aborted: AbortedRanges,
        truncations: int,
        abort: threading.Event,
    ) -> int | None:
        """Map the dirty section, one segment per executor step; the round's end offset,
        or None when the log changed."""
        log = to_clean.log
        start = to_clean.first_dirty_offset
        dirty = segments_between(log, start, to_clean.first_uncleanable_offset)
        position = dirty[0].offset_index.lookup(start).position
        offset_map.clear()
        for i, segment in enumerate(dirty):
            full = await self._on_sources(
                log,
                [segment],
                truncations,
                map_segment,
                position,
                start,
                offset_map,
                aborted,
                abort,
            )
            if full is None:
                return None
            if full:
                break
            # Past the segment's last batch, up to the next one: a gap is cleaned through.
            next_start = (
                dirty[i + 1].base_offset
                if i + 1 < len(dirty)
                else to_clean.first_uncleanable_offset
            )
            offset_map.update_latest_offset(next_start - 1)
            position = 0
        end_offset = offset_map.latest_offset + 1
        if end_offset <= start:
            raise RuntimeError(f"the offset map cannot hold one key of {log.topic_partition}")
        return end_offset

    async def _on_sources(
        self,
        log: UnifiedLog,
        segments: Sequence[LogSegment],
        truncations: int,
        fn: Callable[..., T],
        *args: Any,
    ) -> T | None:
        """``fn(sources, *args)`` in the executor, on descriptors of its own for
        ``segments`` (dup'ed here, closed by the executor thread when it is done, so
        never while it reads, even if this task is cancelled); None, without running
        it, when they are no longer the log's."""
        current = {id(s) for s in log.segments}
        if (
            log.deleted
            or log.truncations != truncations
            or any(id(s) not in current for s in segments)
        ):
            return None
        sources = [SegmentSource(s.base_offset, os.dup(s.fd), s.size) for s in segments]
        return await self._run(_closing_sources, fn, sources, *args)

    def _abandoned(self, log: UnifiedLog) -> None:
        log_event(
            _log,
            logging.INFO,
            "log_cleaning_abandoned",
            partition=str(log.topic_partition),
            reason="the log changed during the round",
        )

    def _run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- checkpoints -------------------------------------------------------------------

    def _set_checkpoint(self, tp: TopicPartition, offset: int) -> None:
        self._checkpoints[tp] = offset
        log = self._logs.get(tp)
        if log is not None:
            self._marks[tp] = (log, log.truncations)
            self._request_write(os.path.dirname(log.dir))

    def _request_write(self, path: str) -> None:
        writer = self._writers.get(path)
        if writer is not None:
            self._written.add(path)
            writer.request()

    def _snapshot_of(self, path: str) -> Callable[[], dict[TopicPartition, int]]:
        def snapshot() -> dict[TopicPartition, int]:
            return {
                tp: offset
                for tp, offset in self._checkpoints.items()
                if (log := self._logs.get(tp)) is not None
                and not log.deleted
                and os.path.dirname(log.dir) == path
            }

        return snapshot


def _closing_sources(fn: Callable[..., T], sources: Sequence[SegmentSource], *args: Any) -> T:
    try:
        return fn(sources, *args)
    finally:
        for source in sources:
            os.close(source.fd)


def _now_ms() -> int:
    return int(time.time() * 1000)


def replace_segments(
    log: UnifiedLog, cleaned: LogSegment, old: Sequence[LogSegment], truncations: int
) -> bool:
    """Swap ``cleaned`` in for ``old`` (`LocalLog.replace_segments`). False, and nothing
    changed, when the log changed meanwhile: deleted, truncated since ``truncations``, or
    ``old`` no longer its segments. Event-loop only."""
    if log.deleted or truncations != log.truncations:
        return False
    if not log.local_log.replace_segments(cleaned, old):
        return False
    for segment in old[1:]:
        # Kafka drops the producer snapshots of the segments gone, not replaced.
        log.producer_state.delete_snapshot(segment.base_offset)
    return True
