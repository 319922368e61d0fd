"""ReplicaFetcher: one task keeping this broker's replicas led by one broker in step with it.

Kafka's AbstractFetcherThread with ReplicaFetcherThread's choices (num.replica.fetchers=1:
one fetcher per source broker). Each partition goes through two phases (`FetchPhase`):

- TRUNCATING (KIP-101/279): ask the leader with OffsetForLeaderEpoch where the
  local log's latest epoch ends, truncate the log and its epoch cache there
  (`truncation.offset_truncation_state`), and ask again, with the then latest epoch, while
  the answer names an epoch this log does not know. A log without epochs truncates to the
  offset it was added at, its high watermark (Kafka's truncateToHighWatermark).
- FETCHING: Fetch (v12+, with the last fetched epoch) from the log end offset; append the
  leader's batches as they are (`Partition.append_records_to_follower`) and take its high
  watermark and log start offset. A diverging epoch in the answer truncates as above;
  OFFSET_OUT_OF_RANGE moves the fetch position by the leader's log end and start offsets
  (Kafka's fetchOffsetAndTruncate); OFFSET_MOVED_TO_TIERED_STORAGE restarts the log at
  the leader's local start with the state the remote tier holds below it (KIP-405,
  `replica_fetcher_tier_state_machine`). Any other error holds the partition back for
  replica.fetch.backoff.ms, as does a failed request (the connection is reopened by the
  next one): the fetcher never spins and never stops on an error. An unexpected error
  while applying one partition's data (a bug, or a fetch position that is not the log
  end) marks that partition failed (`failed_partitions`) and leaves the others going.

A partition's `PartitionFetchState` is replaced, never changed in place, and an answer is
applied only while the state it was asked for is still the current one: a partition
removed meanwhile (it became leader, was deleted) or re-added (a new leader epoch)
ignores late answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import ErrorCode, KafkaError
from tiercel.server.partition import Partition
from tiercel.server.remote_log_reads import RemoteLogReads
from tiercel.server.replication.failed_partitions import FailedPartitions
from tiercel.server.replication.fetch_state import (
    EpochEndOffset,
    FetchPartition,
    FetchPartitionData,
    FetchPhase,
    InitialFetchState,
    OffsetTruncationState,
    PartitionFetchState,
)
from tiercel.server.replication.leader_end_point import LeaderEndPoint
from tiercel.server.replication.replica_fetcher_tier_state_machine import (
    build_remote_log_aux_state,
)
from tiercel.server.replication.truncation import offset_truncation_state
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.unified_log import UnexpectedAppendOffsetError, UnifiedLog
from tiercel.tiered.daemon_thread_pool import DaemonThreadPoolExecutor

_log: Final = logging.getLogger("tiercel.replica_fetcher")

# The follower's local replicas, as the replica manager hosts them.
FollowerPartitions = Callable[[TopicPartition], Partition | None]
# Errors that mean the two brokers' metadata differ for now (leadership moved, or the
# leader has not heard of the topic yet): the news is on its way (INFO, not WARNING).
_METADATA_ERRORS: Final = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
    }
)


def _own_end_offset(log: UnifiedLog, epoch: int) -> tuple[int, int] | None:
    """The follower's (epoch, end offset) for ``epoch``; None when its cache cannot say."""
    found_epoch, end_offset = log.end_offset_for_epoch(epoch)
    return None if end_offset < 0 else (found_epoch, end_offset)


class ReplicaFetcher:
    """Replicates the partitions ``leader`` leads into this broker's logs.

    Event-loop only: one task (`start`/`stop`) runs `run_once` in a loop; `add_partitions`
    and `remove_partitions` may be called at any time in between. Invariants: ``_states``
    holds exactly the partitions this fetcher follows; a FETCHING state's fetch offset is
    its log's end offset; a failing round or partition is delayed, never retried at once.
    """

    def __init__(
        self,
        leader: LeaderEndPoint,
        partitions: FollowerPartitions,
        partition_max_bytes: int,
        backoff_ms: int,
        remote_log_manager: Callable[[], RemoteLogReads | None] = lambda: None,
        failed_partitions: FailedPartitions | None = None,
    ) -> None:
        """``remote_log_manager``: the broker's, once tiering is on (KIP-405);
        ``failed_partitions``: the manager's, shared by its fetchers."""
        self._leader = leader
        self.failed_partitions = (
            FailedPartitions() if failed_partitions is None else failed_partitions
        )
        self._remote_log_manager = remote_log_manager
        self._partitions = partitions
        self._partition_max_bytes = partition_max_bytes
        self._backoff_s = backoff_ms / 1000
        self._states: dict[TopicPartition, PartitionFetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        # The remote reads of a tiered rebuild (KIP-405 BuildingRemoteLogAuxState): this
        # fetcher's own thread, as Kafka runs them on the ReplicaFetcherThread, one at a
        # time (the fetcher awaits each); started with the first rebuild.
        self._tier_executor = DaemonThreadPoolExecutor(1, f"replica-fetcher-{self.leader_id}-tier")

    @property
    def leader_id(self) -> int:
        return self._leader.leader_id

    @property
    def partition_count(self) -> int:
        return len(self._states)

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        return self._states.get(tp)

    def add_partitions(self, initial: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Follow these partitions from scratch: truncate first, then fetch."""
        for tp, state in initial.items():
            self._states[tp] = PartitionFetchState(
                state.topic_id,
                state.init_offset,
                state.current_leader_epoch,
                FetchPhase.TRUNCATING,
                None,
            )
        self._wake.set()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._states.pop(tp, None)

    # -- the task ------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{self.leader_id}"
        )

    def stop(self) -> asyncio.Task[None] | None:
        """Cancel the task and close the connection; returns the task, to be awaited."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        self._leader.close()
        # A remote read in flight finishes in its daemon thread, its result dropped.
        self._tier_executor.shutdown(wait=False, cancel_futures=True)
        return task

    async def _run(self) -> None:
        while True:
            try:
                worked = await self.run_once()
            except Exception as e:
                # A bug must not end replication: report it and carry on after a pause.
                log_event(
                    _log,
                    logging.ERROR,
                    "replica_fetcher_error",
                    leader=self.leader_id,
                    reason=repr(e),
                )
                await asyncio.sleep(self._backoff_s)
                continue
            if not worked:
                await self._idle()

    async def run_once(self) -> bool:
        """One round: truncate the partitions that must, then fetch for the others.
        False, without waiting for anything, if no partition was ready."""
        truncating = self._ready(FetchPhase.TRUNCATING)
        if truncating:
            await self._truncate(truncating)
        fetching = self._ready(FetchPhase.FETCHING)  # after truncation: they may be new
        if fetching:
            await self._fetch(fetching)
        return bool(truncating or fetching)

    def _ready(self, phase: FetchPhase) -> dict[TopicPartition, PartitionFetchState]:
        """The partitions in ``phase`` not held back, now."""
        now = asyncio.get_running_loop().time()
        return {tp: s for tp, s in self._states.items() if s.phase is phase and s.is_ready(now)}

    async def _idle(self) -> None:
        """Wait until a partition is added or the earliest held-back one is due."""
        self._wake.clear()
        now = asyncio.get_running_loop().time()
        due = [s.delayed_until - now for s in self._states.values()]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(min(due), 0.0) if due else None):  # keeps cancellation
                await self._wake.wait()

    # -- truncation ------------------------------------------------------------------------

    async def _truncate(self, ready: dict[TopicPartition, PartitionFetchState]) -> None:
        requests: dict[TopicPartition, tuple[int, int]] = {}
        for tp, state in ready.items():
            partition = self._follower(tp)
            if partition is None:
                continue
            latest = partition.log.leader_epoch_cache.latest_epoch
            if latest is None:
                self._truncated(
                    tp, state, partition, OffsetTruncationState(state.fetch_offset, True)
                )
            else:
                requests[tp] = (state.current_leader_epoch, latest)
        if not requests:
            return
        try:
            answers = await self._leader.fetch_epoch_end_offsets(requests)
        except Exception as e:
            self._request_failed({tp: ready[tp] for tp in requests}, "offset_for_leader_epoch", e)
            return
        self._request_succeeded()
        for tp in requests:
            state = ready[tp]
            partition = self._current(tp, state)
            if partition is None:
                continue
            answer = answers.get(tp)
            if answer is None:
                self._partition_failed(tp, state, "offset_for_leader_epoch", "no answer")
            elif answer.error != ErrorCode.none:
                self._partition_error(tp, state, answer.error, "offset_for_leader_epoch")
            else:
                self._truncate_to_epoch_end_offset(tp, state, partition, answer)

    def _truncate_to_epoch_end_offset(
        self,
        tp: TopicPartition,
        state: PartitionFetchState,
        partition: Partition,
        leader: EpochEndOffset,
    ) -> None:
        log = partition.log
        truncation = offset_truncation_state(
            leader,
            lambda epoch: _own_end_offset(log, epoch),
            log.log_end_offset,
            state.fetch_offset,
        )
        log_event(
            _log,
            logging.INFO,
            "follower_truncating",
            partition=str(tp),
            leader=self.leader_id,
            leader_epoch=leader.leader_epoch,
            leader_end_offset=leader.end_offset,
            log_end_offset=log.log_end_offset,
            truncate_to=truncation.offset,
            completed=truncation.truncation_completed,
        )
        self._truncated(tp, state, partition, truncation)

    def _truncated(
        self,
        tp: TopicPartition,
        state: PartitionFetchState,
        partition: Partition,
        truncation: OffsetTruncationState,
    ) -> None:
        partition.truncate_to(truncation.offset)
        log = partition.log
        self._states[tp] = PartitionFetchState(
            state.topic_id,
            log.log_end_offset,
            state.current_leader_epoch,
            FetchPhase.FETCHING if truncation.truncation_completed else FetchPhase.TRUNCATING,
            log.leader_epoch_cache.latest_epoch,
        )

    # -- fetching --------------------------------------------------------------------------

    async def _fetch(self, ready: dict[TopicPartition, PartitionFetchState]) -> None:
        request: dict[TopicPartition, FetchPartition] = {}
        for tp, state in ready.items():
            partition = self._follower(tp)
            if partition is None:
                continue
            request[tp] = FetchPartition(
                state.topic_id,
                tp.partition,
                state.fetch_offset,
                state.current_leader_epoch,
                -1 if state.last_fetched_epoch is None else state.last_fetched_epoch,
                partition.log.log_start_offset,
                self._partition_max_bytes,
            )
        if not request:
            return
        try:
            responses = await self._leader.fetch(request)
        except Exception as e:
            self._request_failed({tp: ready[tp] for tp in request}, "fetch", e)
            return
        self._request_succeeded()
        for tp, data in responses.items():
            asked = ready.get(tp)
            partition = None if asked is None else self._current(tp, asked)
            if asked is None or partition is None:
                continue
            try:
                await self._process_partition_data(tp, asked, partition, data)
            except Exception as e:
                self._mark_partition_failed(tp, asked, e)

    async def _process_partition_data(
        self,
        tp: TopicPartition,
        state: PartitionFetchState,
        partition: Partition,
        data: FetchPartitionData,
    ) -> None:
        if data.error == ErrorCode.offset_out_of_range:
            await self._handle_out_of_range(tp, state, partition)
        elif data.error == ErrorCode.offset_moved_to_tiered_storage:
            await self._handle_offset_moved_to_tiered_storage(tp, state, partition)
        elif data.error != ErrorCode.none:
            self._partition_error(tp, state, data.error, "fetch")
        elif data.diverging_epoch is not None:
            epoch, end_offset = data.diverging_epoch
            self._truncate_to_epoch_end_offset(
                tp, state, partition, EpochEndOffset(ErrorCode.none, epoch, end_offset)
            )
        else:
            await self._append(tp, state, partition, data)

    async def _append(
        self,
        tp: TopicPartition,
        state: PartitionFetchState,
        partition: Partition,
        data: FetchPartitionData,
    ) -> None:
        log = partition.log
        if state.fetch_offset != log.log_end_offset:
            # Kafka's ReplicaFetcherThread.processPartitionData: data fetched from
            # anywhere but the log end cannot be appended; asking again from the same
            # position would fail the same way for ever.
            raise UnexpectedAppendOffsetError(
                f"fetched {tp} at {state.fetch_offset}, its log end offset is {log.log_end_offset}",
                state.fetch_offset,
                state.fetch_offset,
            )
        try:
            info = partition.append_records_to_follower(data.records)
        except KafkaError as e:
            # Corrupt batches: fetch them again after a pause, as Kafka does (a torn or
            # changing leader log heals by the next fetch).
            self._partition_failed(tp, state, "append", repr(e))
            return
        partition.update_follower_high_watermark(data.high_watermark, data.log_start_offset)
        if info is not None:
            # Moved to the end (Kafka's updateAndMoveToEnd): the response's byte budget
            # goes first to the partitions that got nothing this time, so none starves
            # and a partition handed only part of a large batch gets it whole next time.
            del self._states[tp]
            self._states[tp] = replace(
                state,
                fetch_offset=log.log_end_offset,
                last_fetched_epoch=log.leader_epoch_cache.latest_epoch,
            )
            if log.needs_flush:
                # flush.messages holds for followers too (Kafka's append flushes both).
                await log.flush()

    async def _handle_out_of_range(
        self, tp: TopicPartition, state: PartitionFetchState, partition: Partition
    ) -> None:
        """Kafka's fetchOffsetAndTruncate: a leader ending below this log (an unclean
        election) has this log truncated to its end; a leader starting above this log's
        end (it deleted what this log lacks) has this log restarted at its start."""
        epoch = state.current_leader_epoch
        leader_start = -1
        try:
            error, leader_end = await self._leader.fetch_latest_offset(tp, epoch)
            if error == ErrorCode.none and leader_end >= partition.log.log_end_offset:
                error, leader_start = await self._leader.fetch_earliest_offset(tp, epoch)
        except Exception as e:
            self._request_failed({tp: state}, "list_offsets", e)
            return
        if self._current(tp, state) is None:
            return
        if error != ErrorCode.none:
            self._partition_error(tp, state, error, "list_offsets")
            return
        log = partition.log
        replica_end = log.log_end_offset
        if leader_end < replica_end:
            partition.truncate_to(leader_end)
        elif leader_start > replica_end:
            partition.truncate_fully_and_start_at(leader_start)
        log_event(
            _log,
            logging.WARNING,
            "follower_offset_out_of_range",
            partition=str(tp),
            leader=self.leader_id,
            leader_start_offset=leader_start,
            leader_end_offset=leader_end,
            log_end_offset_before=replica_end,
            log_end_offset=log.log_end_offset,
        )
        moved = log.log_end_offset != replica_end
        self._states[tp] = PartitionFetchState(
            state.topic_id,
            log.log_end_offset,
            epoch,
            FetchPhase.FETCHING,
            log.leader_epoch_cache.latest_epoch,
            # Nothing to change here means the leader refused a position inside its log
            # (it did not know the last fetched epoch): do not ask again at once.
            0.0 if moved else self._retry_at(),
        )

    async def _handle_offset_moved_to_tiered_storage(
        self, tp: TopicPartition, state: PartitionFetchState, partition: Partition
    ) -> None:
        """KIP-405: restart at the leader's local start with the state the remote tier
        holds below it (`replica_fetcher_tier_state_machine`); on failure back off and
        fetch (and be told 109) again, as Kafka retries."""
        try:
            offset = await build_remote_log_aux_state(
                self._leader,
                self._remote_log_manager(),
                tp,
                state.current_leader_epoch,
                partition,
                self._tier_executor,
                lambda: self._current(tp, state) is partition and not partition.is_leader,
            )
        except Exception as e:
            self._partition_failed(tp, state, "build_remote_log_aux_state", repr(e))
            return
        log = partition.log
        log_event(
            _log,
            logging.INFO,
            "follower_built_remote_log_aux_state",
            partition=str(tp),
            leader=self.leader_id,
            fetch_offset=offset,
            log_start_offset=log.log_start_offset,
        )
        if self._current(tp, state) is not None:
            self._states[tp] = PartitionFetchState(
                state.topic_id,
                offset,
                state.current_leader_epoch,
                FetchPhase.FETCHING,
                log.leader_epoch_cache.latest_epoch,
            )

    # -- errors ----------------------------------------------------------------------------

    def _retry_at(self) -> float:
        return asyncio.get_running_loop().time() + self._backoff_s

    def _partition_error(
        self, tp: TopicPartition, state: PartitionFetchState, error: ErrorCode, request: str
    ) -> None:
        level = logging.INFO if error in _METADATA_ERRORS else logging.WARNING
        self._hold_back(tp, state, request, error.name, level)

    def _partition_failed(
        self, tp: TopicPartition, state: PartitionFetchState, request: str, reason: str
    ) -> None:
        self._hold_back(tp, state, request, reason, logging.WARNING)

    def _mark_partition_failed(
        self, tp: TopicPartition, state: PartitionFetchState, error: Exception
    ) -> None:
        """Kafka's markPartitionFailed: stop fetching ``tp`` until it is added again
        (`FailedPartitions`). Whatever the failed append wrote stays; fetching on from
        a position the log may already have passed would fail for ever."""
        log_event(
            _log,
            logging.ERROR,
            "replica_partition_failed",
            partition=str(tp),
            leader=self.leader_id,
            leader_epoch=state.current_leader_epoch,
            fetch_offset=state.fetch_offset,
            reason=repr(error),
        )
        _log.debug("traceback", exc_info=error)
        if self._states.get(tp) is state:
            del self._states[tp]
        self.failed_partitions.add(tp)

    def _hold_back(
        self, tp: TopicPartition, state: PartitionFetchState, request: str, reason: str, level: int
    ) -> None:
        log_event(
            _log,
            level,
            "follower_partition_backing_off",
            partition=str(tp),
            leader=self.leader_id,
            leader_epoch=state.current_leader_epoch,
            request=request,
            reason=reason,
        )
        self._states[tp] = replace(state, delayed_until=self._retry_at())

    def _request_failed(
        self, states: Mapping[TopicPartition, PartitionFetchState], request: str, error: Exception
    ) -> None:
        """The leader could not be asked (connection, timeout, protocol): hold every
        partition of the request back; only the first failure in a row is a warning."""
        log_event(
            _log,
            logging.DEBUG if self._failing else logging.WARNING,
            "replica_fetch_request_failed",
            leader=self.leader_id,
            request=request,
            partitions=len(states),
            reason=repr(error),
        )
        self._failing = True
        retry_at = self._retry_at()
        for tp, state in states.items():
            if self._states.get(tp) is state:
                self._states[tp] = replace(state, delayed_until=retry_at)

    def _request_succeeded(self) -> None:
        if self._failing:
            self._failing = False
            log_event(_log, logging.INFO, "replica_fetch_leader_reachable", leader=self.leader_id)

    # -- partitions ------------------------------------------------------------------------

    def _follower(self, tp: TopicPartition) -> Partition | None:
        """The local replica, or None (and the partition dropped) if it is gone."""
        partition = self._partitions(tp)
        if partition is None:
            self._states.pop(tp, None)
        return partition

    def _current(self, tp: TopicPartition, state: PartitionFetchState) -> Partition | None:
        """The local replica if ``state`` is still the partition's current state."""
        if self._states.get(tp) is not state:
            return None
        return self._follower(tp)
