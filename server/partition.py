"""Partition: this broker's view of one partition — leadership, epoch, reads, offsets.

Event-loop only. The controller decides leadership and epochs (through the
MetadataStore); `make_leader` and `make_follower` apply them (Kafka's
``Partition.makeLeader`` / ``makeFollower``):

- The leader appends through its `Log`, stamping each batch with its leader epoch; its
  ISR, high watermark and follower tracking are `PartitionIsr`'s (partition_isr.py).
- A new leader epoch starts at the log end offset, recorded in the epoch cache at once
  (KIP-101); until the high watermark reaches that start, the offsets a consumer may
  see are not known yet, so ListOffsets answers OFFSET_NOT_AVAILABLE (KIP-207).
- A follower appends what its fetcher brings, takes min(leader HW, own LEO) as its HW
  and follows the leader's log start offset (Kafka's ``ReplicaFetcherThread``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import (
    FencedLeaderEpochError,
    KafkaError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    UnknownLeaderEpochError,
)
from tiercel.protocol.list_offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    IsolationLevel,
)
from tiercel.server.offset_by_timestamp import (
    DEFAULT_REMOTE_LIST_OFFSETS_TIMEOUT_MS,
    fetch_offset_by_timestamp,
)
from tiercel.server.partition_isr import AlterPartitionManager, PartitionIsr, committed
from tiercel.server.remote_log_reads import RemoteLogReads
from tiercel.server.replica import Replica
from tiercel.storage.log_transactions import EndTxnMarkerEntry, end_txn_marker_append_batch
from tiercel.storage.log_validator import ValidatedRecords
from tiercel.storage.log_values import (
    FetchDataInfo,
    FetchIsolation,
    LogAppendInfo,
    LogOffsetMetadata,
    TimestampAndOffset,
)
from tiercel.storage.producer_append_info import AppendOrigin
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.storage.unified_log import UnexpectedAppendOffsetError, UnifiedLog
from tiercel.storage.verification_guard import SENTINEL, VerificationGuard

_log: Final = logging.getLogger("tiercel.partition")


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Leadership as the controller recorded it (Kafka's LeaderAndIsrPartitionState)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int = 0
    controller_epoch: int = 0


@dataclass(frozen=True, slots=True)
class LogReadResult:
    info: FetchDataInfo
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    diverging_epoch: tuple[int, int] | None = None
    """(epoch, end offset) when the fetcher's last fetched epoch diverges (KIP-320)."""


@dataclass(frozen=True, slots=True)
class OffsetResultHolder:
    """A ListOffsets lookup on one partition (Kafka's OffsetResultHolder): ``found`` is
    answered unless it lies at or past ``last_fetchable_offset`` (timestamp lookups
    only), in which case ``offsets_error`` is raised if set, or nothing is found."""

    found: TimestampAndOffset | None
    last_fetchable_offset: int | None = None
    offsets_error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class ReplicationContext:
    """What every partition of a broker shares: configuration and the ways out."""

    replica_lag_time_max_ms: int
    alter_partition: AlterPartitionManager
    is_replica_isr_eligible: Callable[[int], bool]
    """Kafka's ZK-mode rule: the broker is alive (registered) and not shutting down."""
    is_broker_alive: Callable[[int], bool]
    """The broker is registered (Kafka's MetadataCache.hasAliveBroker)."""
    on_delayed_work: Callable[[TopicPartition], None]
    """The HW or a follower's log start moved, or leadership changed: re-check the
    delayed fetches, produces and DeleteRecords."""
    spawn: Callable[[Coroutine[Any, Any, None], str], object]
    clock_ms: Callable[[], int]


class Partition(PartitionIsr):
    """One partition replica hosted by this broker. Event-loop only.

    Invariants: ``state`` is the latest leadership applied (never an older partition
    epoch); the remote replicas are exactly the assigned replicas other than this one;
    as leader, ``log.high_watermark`` never decreases and never passes the smallest
    log end offset of the maximal ISR; as follower, the ISR bookkeeping is empty.
    """

    __slots__ = ("topic_id",)

    def __init__(
        self,
        topic_partition: TopicPartition,
        topic_id: uuid.UUID,
        log: UnifiedLog,
        local_broker_id: int,
        context: ReplicationContext,
    ) -> None:
        self.topic_partition = topic_partition
        self.topic_id = topic_id
        self.log = log
        self.local_broker_id = local_broker_id
        self._context = context
        self.state = PartitionState(-1, -1, (), ())
        self._remote: dict[int, Replica] = {}
        self._isr = committed(())
        self._leader_epoch_start_offset: int | None = None

    # -- leadership --------------------------------------------------------------------

    def make_leader(self, state: PartitionState) -> bool:
        """Become (or stay) leader per ``state``; True if this broker just became the
        leader or the leader epoch is new.

        A new epoch starts at the log end offset and is recorded in the epoch cache at
        once (KIP-101), and the followers' states are reset; the HW never moves back."""
        if state.partition_epoch < self.state.partition_epoch:
            return self._skip_stale(state)
        now = self._context.clock_ms()
        is_new_leader = not self.is_leader
        is_new_epoch = state.leader_epoch > self.state.leader_epoch
        if is_new_leader or state.partition_epoch > self.state.partition_epoch:
            self._update_assignment_and_isr(state.replicas, state.isr)
        else:
            # The state node this leader already applied (its own ISR write coming back
            # through the watch, or an assignment change): an ISR change in flight stays.
            self._update_assignment(state.replicas)
        if is_new_epoch:
            start = self.log.log_end_offset
            self.log.maybe_assign_epoch_start_offset(state.leader_epoch, start)
            for replica in self._remote.values():
                replica.reset_replica_state(
                    now, start, is_new_leader, replica.broker_id in state.isr
                )
            self._leader_epoch_start_offset = start
            log_event(
                _log,
                logging.INFO,
                "became_leader",
                partition=str(self.topic_partition),
                leader_epoch=state.leader_epoch,
                partition_epoch=state.partition_epoch,
                log_end_offset=start,
                high_watermark=self.log.high_watermark,
                isr=",".join(map(str, state.isr)),
            )
        self.state = state
        if self._maybe_increment_leader_hw(now):
            self._context.on_delayed_work(self.topic_partition)
        return is_new_leader or is_new_epoch

    def make_follower(self, state: PartitionState) -> bool:
        """Follow ``state.leader``; True if the fetcher must (re)start: a new leader or
        leader epoch, or this broker led until now."""
        if state.partition_epoch < self.state.partition_epoch:
            return self._skip_stale(state)
        previous = self.state
        self.state = state
        self._leader_epoch_start_offset = None
        self._update_assignment_and_isr(state.replicas, ())
        changed = (
            state.leader_epoch > previous.leader_epoch
            or state.leader != previous.leader
            or previous.leader == self.local_broker_id
        )
        if changed:
            log_event(
                _log,
                logging.INFO,
                "became_follower",
                partition=str(self.topic_partition),
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                log_end_offset=self.log.log_end_offset,
                high_watermark=self.log.high_watermark,
            )
        return changed

    def _skip_stale(self, state: PartitionState) -> bool:
        log_event(
            _log,
            logging.INFO,
            "stale_partition_state_skipped",
            partition=str(self.topic_partition),
            partition_epoch=state.partition_epoch,
            current_partition_epoch=self.state.partition_epoch,
        )
        return False

    def _update_assignment(self, replicas: tuple[int, ...]) -> None:
        self._remote = {
            broker_id: self._remote.get(broker_id) or Replica(broker_id)
            for broker_id in replicas
            if broker_id != self.local_broker_id
        }

    def _update_assignment_and_isr(self, replicas: tuple[int, ...], isr: tuple[int, ...]) -> None:
        self._update_assignment(replicas)
        self._isr = committed(isr)

    def _check_leader(self, current_leader_epoch: int | None = None) -> None:
        self.check_epoch(current_leader_epoch)
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic_partition}"
            )

    def check_epoch(self, current_leader_epoch: int | None) -> None:
        """KIP-320 fencing: a request from an older epoch is fenced, a newer one unknown."""
        if current_leader_epoch is None or current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"epoch {current_leader_epoch} is older than {self.leader_epoch} "
                f"for {self.topic_partition}"
            )
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"epoch {current_leader_epoch} is newer than {self.leader_epoch} "
                f"for {self.topic_partition}"
            )

    # -- produce -----------------------------------------------------------------------

    def check_min_isr(self, required_acks: int) -> None:
        if required_acks == -1 and len(self._isr.isr) < self._effective_min_isr():
            raise NotEnoughReplicasError(
                f"ISR {list(self._isr.isr)} of {self.topic_partition} is smaller than "
                f"min.insync.replicas={self._effective_min_isr()}"
            )

    def maybe_start_transaction_verification(
        self, producer_id: int, sequence: int, epoch: int
    ) -> VerificationGuard:
        """As the leader: the guard a first transactional write must present, SENTINEL
        when the producer's transaction is already open here (KIP-890 part 1)."""
        self._check_leader()
        return self.log.maybe_start_transaction_verification(producer_id, sequence, epoch)

    def append_records_to_leader(
        self,
        validated: ValidatedRecords,
        required_acks: int,
        now_ms: int,
        verification_guard: VerificationGuard = SENTINEL,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        self._check_leader()
        self.check_min_isr(required_acks)
        info = self.log.append_as_leader(
            validated, self.leader_epoch, now_ms, verification_guard, origin
        )
        self._maybe_increment_leader_hw(now_ms)
        return info

    def append_end_txn_marker(self, entry: EndTxnMarkerEntry, now_ms: int) -> LogAppendInfo:
        """Append a transaction's COMMIT/ABORT control batch as the leader (Kafka's
        appendRecordsToLeader with AppendOrigin.COORDINATOR): the producer state checks
        its producer and coordinator epochs."""
        self._check_leader()
        self.check_min_isr(-1)
        log = self.log
        offset = log.log_end_offset
        batch = end_txn_marker_append_batch(
            entry.marker,
            entry.producer_id,
            entry.producer_epoch,
            offset,
            self.leader_epoch,
            log.config,
            now_ms,
        )
        log.append([batch], AppendOrigin.COORDINATOR)
        self._maybe_increment_leader_hw(now_ms)
        return LogAppendInfo(
            first_offset=offset,
            last_offset=offset,
            max_timestamp=batch.max_timestamp,
            offset_of_max_timestamp=offset,
            log_append_time=-1,
            log_start_offset=log.log_start_offset,
            num_messages=1,
            valid_bytes=batch.size,
        )

    def check_enough_replicas_reach_offset(
        self, required_offset: int
    ) -> tuple[bool, KafkaError | None]:
        """acks=all: (done, error) for an append ending before ``required_offset``. Done
        once the HW covers it; NOT_ENOUGH_REPLICAS_AFTER_APPEND if by then the maximal
        ISR is below min.insync.replicas (Kafka's checkEnoughReplicasReachOffset)."""
        if not self.is_leader:
            return True, NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} no longer leads {self.topic_partition}"
            )
        if self.log.high_watermark < required_offset:
            return False, None
        if len(self._isr.maximal_isr) < self._effective_min_isr():
            return True, NotEnoughReplicasAfterAppendError(
                f"ISR {sorted(self._isr.maximal_isr)} of {self.topic_partition} shrank below "
                f"min.insync.replicas={self._effective_min_isr()} after the append"
            )
        return True, None

    # -- reads -------------------------------------------------------------------------

    def read_records(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation: FetchIsolation,
        min_one_message: bool,
        current_leader_epoch: int | None,
        last_fetched_epoch: int = -1,
    ) -> LogReadResult:
        self._check_leader(current_leader_epoch)
        log = self.log
        # Taken before the read: appends after it must not make a follower look caught up.
        high_watermark = log.high_watermark
        log_start = log.log_start_offset
        log_end = log.log_end_offset
        if last_fetched_epoch >= 0:
            epoch, end_offset = log.end_offset_for_epoch(last_fetched_epoch)
            if epoch < 0 or end_offset < 0:
                raise OffsetOutOfRangeError(
                    f"the end offset of epoch {last_fetched_epoch} of {self.topic_partition} "
                    f"is unknown here"
                )
            if fetch_offset < log_start:
                raise OffsetOutOfRangeError(
                    f"offset {fetch_offset} of {self.topic_partition} is below the log start "
                    f"offset {log_start}"
                )
            # KIP-320: the fetcher's log diverges if its last epoch ends earlier here than
            # where it wants to read, or is unknown here: tell it where to truncate.
            if epoch < last_fetched_epoch or end_offset < fetch_offset:
                return LogReadResult(
                    FetchDataInfo(LogOffsetMetadata(fetch_offset), b""),
                    high_watermark,
                    log_start,
                    log_end,
                    high_watermark,
                    (epoch, end_offset),
                )
        last_stable = log.last_stable_offset
        info = log.read(fetch_offset, max_bytes, isolation, min_one_message)
        return LogReadResult(info, high_watermark, log_start, log_end, last_stable)

    def fetch_records_for_follower(
        self,
        replica_id: int,
        fetch_offset: int,
        follower_log_start_offset: int,
        max_bytes: int,
        min_one_message: bool,
        current_leader_epoch: int | None,
        last_fetched_epoch: int,
        update_fetch_state: bool,
    ) -> LogReadResult:
        """A follower's Fetch: read to the log end, then record where the follower is
        (not for a re-read after a long poll, nor when its log diverges)."""
        fetch_time = self._context.clock_ms()
        self._check_leader(current_leader_epoch)
        replica = self._remote.get(replica_id)
        if replica is None:
            message = f"broker {replica_id} is not a replica of {self.topic_partition}"
            if current_leader_epoch is not None and current_leader_epoch >= 0:
                # Possibly a replica being added that this leader has not heard of yet.
                raise UnknownLeaderEpochError(message)
            raise NotLeaderOrFollowerError(message)
        read = self.read_records(
            fetch_offset,
            max_bytes,
            FetchIsolation.LOG_END,
            min_one_message,
            current_leader_epoch,
            last_fetched_epoch,
        )
        if update_fetch_state and read.diverging_epoch is None:
            self._update_follower_fetch_state(
                replica,
                read.info.fetch_offset_metadata,
                follower_log_start_offset,
                fetch_time,
                read.log_end_offset,
            )
        return read

    async def fetch_offset_for_timestamp(
        self,
        timestamp: int,
        isolation_level: IsolationLevel | None,
        current_leader_epoch: int | None,
        fetch_only_from_leader: bool,
        remote: RemoteLogReads | None = None,
        remote_timeout_ms: int = DEFAULT_REMOTE_LIST_OFFSETS_TIMEOUT_MS,
    ) -> OffsetResultHolder:
        """ListOffsets (Kafka's Partition.fetchOffsetForTimestamp). ``isolation_level``
        is None for a follower, which may see up to the log end; a client sees up to the
        high watermark (read_committed: the last stable offset). While a new leader's
        high watermark is below its epoch's start offset, a client's LATEST (and a
        lookup landing past the high watermark) is OFFSET_NOT_AVAILABLE: the old leader
        may have answered a higher offset (KIP-207). ``remote`` serves the lookups below
        the local log (`offset_by_timestamp`), each bounded by ``remote_timeout_ms``."""
        self.check_epoch(current_leader_epoch)
        if fetch_only_from_leader and not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic_partition}"
            )
        log = self.log
        high_watermark = log.high_watermark
        if isolation_level is None:
            last_fetchable = log.log_end_offset
        elif isolation_level == IsolationLevel.READ_COMMITTED:
            last_fetchable = log.last_stable_offset
        else:
            last_fetchable = high_watermark
        epoch_start = self._leader_epoch_start_offset
        offsets_error = None
        if isolation_level is not None and epoch_start is not None and epoch_start > high_watermark:
            offsets_error = OffsetNotAvailableError(
                f"the high watermark {high_watermark} of {self.topic_partition} is behind the "
                f"start offset {epoch_start} of leader epoch {self.leader_epoch}"
            )
        if timestamp == LATEST_TIMESTAMP:
            if offsets_error is not None:
                raise offsets_error
            epoch = log.leader_epoch_cache.latest_epoch
            return OffsetResultHolder(TimestampAndOffset(-1, last_fetchable, epoch))
        tip = TopicIdPartition(self.topic_id, self.topic_partition)
        found = await fetch_offset_by_timestamp(log, timestamp, tip, remote, remote_timeout_ms)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return OffsetResultHolder(found)  # never past what the asker may read
        return OffsetResultHolder(found, last_fetchable, offsets_error)

    def last_offset_for_leader_epoch(
        self, current_leader_epoch: int | None, leader_epoch: int
    ) -> tuple[int, int]:
        self._check_leader(current_leader_epoch)
        return self.log.end_offset_for_epoch(leader_epoch)

    # -- follower ------------------------------------------------------------------------

    def append_records_to_follower(self, records: bytes | memoryview) -> LogAppendInfo | None:
        """Append fetched batches. A first batch that starts below the log end of an
        empty log (the leader's log start offset fell inside it, DeleteRecords) restarts
        the log at that batch, as Kafka does."""
        log = self.log
        try:
            return log.append_as_follower(records)
        except UnexpectedAppendOffsetError as e:
            end = log.log_end_offset
            if not (end == log.log_start_offset and e.first_offset < end <= e.last_offset):
                raise
            log_event(
                _log,
                logging.INFO,
                "follower_log_restarted_at_batch",
                partition=str(self.topic_partition),
                first_offset=e.first_offset,
                log_start_offset=end,
            )
            log.truncate_fully_and_start_at(e.first_offset)
            return log.append_as_follower(records)

    def update_follower_high_watermark(
        self, leader_high_watermark: int, leader_log_start: int
    ) -> None:
        """min(leader HW, own log end offset), and the leader's log start (Kafka's
        ReplicaFetcherThread.processPartitionData)."""
        log = self.log
        log.update_high_watermark(leader_high_watermark)
        if leader_log_start > log.log_start_offset:
            log.maybe_increment_log_start_offset(min(leader_log_start, log.high_watermark))

    def truncate_to(self, offset: int) -> None:
        """Cut the follower's log (and epoch cache) at ``offset``; its HW follows."""
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int, log_start_offset: int | None = None) -> None:
        """Replace the follower's log by an empty one starting at ``offset``, its log
        start at ``log_start_offset`` when older records are remote."""
        self.log.truncate_fully_and_start_at(offset, log_start_offset)

    def initial_fetch_offset(self) -> int:
        """Where a new fetcher starts: the log end when epochs can settle truncation, the
        high watermark otherwise (Kafka's initialFetchOffset)."""
        if self.log.leader_epoch_cache.latest_epoch is not None:
            return self.log.log_end_offset
        return self.log.high_watermark

    # -- admin -------------------------------------------------------------------------

    def delete_records_on_leader(self, offset: int) -> tuple[int, int]:
        """DeleteRecords: advance the log start offset (-1 means the high watermark);
        returns (the offset asked for, the low watermark now), Kafka's
        LogDeleteRecordsResult. The followers follow with their next fetches."""
        self._check_leader()
        log = self.log
        if not log.config.delete:
            raise PolicyViolationError(
                f"Records of partition {self.topic_partition} can not be deleted: its "
                f"cleanup.policy is {','.join(log.config.cleanup_policy)}"
            )
        target = log.high_watermark if offset == -1 else offset
        if target < 0 or target > log.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.topic_partition} up to {offset}: "
                f"high watermark is {log.high_watermark}"
            )
        log.maybe_increment_log_start_offset(target)
        return target, self.low_watermark_if_leader()
