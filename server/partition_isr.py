"""The leader's side of a Partition: its ISR and high watermark (Kafka's Partition).

Event-loop only. Kafka keeps these in ``Partition``; Tiercel gives them a module of their
own, `PartitionIsr`, the base class of `Partition`, with these rules (Kafka 3.x's):

- The leader tracks every follower (`Replica`) from the fetch offset and log start
  offset of its Fetch requests (``Partition.updateFollowerFetchState``).
- High watermark = the smallest log end offset over the "maximal" ISR (the ISR plus a
  replica being added) and over replicas caught up enough to join it (KIP-497); it only
  moves forward, and not at all while the ISR is smaller than the effective
  min.insync.replicas (Kafka 3.7+; ``maybeIncrementLeaderHW``).
- The ISR grows by a follower whose log end offset reaches the HW within the current
  leader epoch (``maybeExpandIsr``), and shrinks by followers not caught up for
  replica.lag.time.max.ms (``maybeShrinkIsr``). The leader writes the change itself as a
  conditional write of the partition state (its version is the partition epoch), one
  change in flight at a time; a shrink counts only once written, an expansion at once
  (it only makes the HW stricter: Kafka's ``PendingExpandIsr`` maximal ISR).
- The low watermark, for DeleteRecords, is the smallest log start offset over the leader
  and its live followers (``lowWatermarkIfLeader``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final, Protocol

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import NotLeaderOrFollowerError
from tiercel.server.replica import Replica
from tiercel.storage.log_values import LogOffsetMetadata
from tiercel.storage.topic_partition import TopicPartition
from tiercel.storage.unified_log import UnifiedLog

if TYPE_CHECKING:
    from tiercel.server.partition import PartitionState, ReplicationContext

_log: Final = logging.getLogger("tiercel.partition")
# A failed ISR write that may have been a transient store error is retried after this.
ALTER_PARTITION_RETRY_BACKOFF_S: Final = 0.5


class AlterPartitionManager(Protocol):
    """Writes ISR changes of partitions this broker leads (Kafka's ZK-mode updateIsr)."""

    async def submit(self, tp: TopicPartition, proposed: PartitionState) -> PartitionState | None:
        """Write ``proposed`` if the stored state is still at ``proposed.partition_epoch``.

        Returns the state stored afterwards with its new partition epoch: ``proposed``
        if the write won, else whatever the store holds (compare-and-set lost); None
        when the partition is gone. Raises on store failures (the caller retries)."""
        ...


@dataclass(frozen=True, slots=True)
class IsrState:
    """Committed ISR and, while a change is being written (``sent``), the maximal ISR."""

    isr: tuple[int, ...]
    maximal_isr: frozenset[int]
    sent: PartitionState | None = None


def committed(isr: tuple[int, ...]) -> IsrState:
    return IsrState(isr, frozenset(isr))


class PartitionIsr:
    """ISR, high watermark and follower tracking of a partition this broker leads; the
    base of `Partition`, which owns the attributes declared here. Event-loop only."""

    __slots__ = (
        "_context",
        "_isr",
        "_leader_epoch_start_offset",
        "_remote",
        "local_broker_id",
        "log",
        "state",
        "topic_partition",
    )

    topic_partition: TopicPartition
    local_broker_id: int
    log: UnifiedLog
    state: PartitionState
    _context: ReplicationContext
    _isr: IsrState
    _remote: dict[int, Replica]
    _leader_epoch_start_offset: int | None

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.local_broker_id

    @property
    def isr(self) -> tuple[int, ...]:
        """The committed ISR as this leader knows it (empty on a follower)."""
        return self._isr.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self._isr.maximal_isr

    def low_watermark_if_leader(self) -> int:
        """The smallest log start offset over this leader and its live followers, as
        their fetches last reported it (-1 before a follower's first fetch to this
        leader): what DeleteRecords waits for (Kafka's lowWatermarkIfLeader)."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic_partition}"
            )
        low_watermark = self.log.log_start_offset
        for replica in self._remote.values():
            start = replica.state.log_start_offset
            if start < low_watermark and self._context.is_broker_alive(replica.broker_id):
                low_watermark = start
        return low_watermark

    def _effective_min_isr(self) -> int:
        """min.insync.replicas, capped by the replication factor (Kafka 3.x)."""
        return min(self.log.config.min_insync_replicas, len(self._remote) + 1)

    def _maybe_increment_leader_hw(self, now_ms: int) -> bool:
        """HW = the smallest log end offset over the maximal ISR and the replicas caught
        up enough to join it; forward only, and not under min ISR. True if it moved."""
        if not self.is_leader or len(self._isr.isr) < self._effective_min_isr():
            return False
        leader_end = self.log.log_end_offset_metadata
        new_hw = leader_end
        lag = self._context.replica_lag_time_max_ms
        for replica in self._remote.values():
            state = replica.state
            if state.log_end_offset < new_hw.message_offset and (
                replica.broker_id in self._isr.maximal_isr
                or (
                    state.is_caught_up(leader_end.message_offset, now_ms, lag)
                    and self._context.is_replica_isr_eligible(replica.broker_id)
                )
            ):
                new_hw = state.log_end_offset_metadata
        return self.log.maybe_increment_high_watermark(new_hw)

    def _update_follower_fetch_state(
        self,
        replica: Replica,
        fetch_offset_metadata: LogOffsetMetadata,
        follower_start_offset: int,
        fetch_time_ms: int,
        leader_end_offset: int,
    ) -> None:
        previous = replica.state
        # The low watermark can only rise when this follower's log start moved: only then
        # is it worth computing (DeleteRecords waits for it).
        start_moved = follower_start_offset != previous.log_start_offset
        old_low_watermark = self.low_watermark_if_leader() if start_moved else -1
        replica.update_fetch_state(
            fetch_offset_metadata, follower_start_offset, fetch_time_ms, leader_end_offset
        )
        low_watermark_moved = start_moved and self.low_watermark_if_leader() > old_low_watermark
        self._maybe_expand_isr(replica)
        hw_moved = replica.state.log_end_offset != previous.log_end_offset and (
            self._maybe_increment_leader_hw(fetch_time_ms)
        )
        # Kafka's updateFollowerFetchState: leaderLWIncremented || leaderHWIncremented.
        if low_watermark_moved or hw_moved:
            self._context.on_delayed_work(self.topic_partition)

    def _maybe_expand_isr(self, replica: Replica) -> None:
        """Add a follower that reached the HW within the current leader epoch (a replica
        behind the epoch start could miss records committed in it if elected)."""
        broker_id = replica.broker_id
        if (
            self._isr.sent is not None
            or broker_id in self._isr.isr
            or not self._context.is_replica_isr_eligible(broker_id)
        ):
            return
        end = replica.state.log_end_offset
        epoch_start = self._leader_epoch_start_offset
        if end < self.log.high_watermark or epoch_start is None or end < epoch_start:
            return
        log_event(
            _log,
            logging.INFO,
            "isr_expanding",
            partition=str(self.topic_partition),
            isr=",".join(map(str, self._isr.isr)),
            replica=broker_id,
            replica_log_end_offset=end,
            high_watermark=self.log.high_watermark,
        )
        self._submit_isr_change((*self._isr.isr, broker_id), self._isr.maximal_isr | {broker_id})

    def maybe_shrink_isr(self) -> None:
        """Remove the followers not caught up within replica.lag.time.max.ms (the
        ISR-expiration task, every half of it)."""
        if not self.is_leader or self._isr.sent is not None:
            return
        now = self._context.clock_ms()
        leader_end = self.log.log_end_offset
        lag = self._context.replica_lag_time_max_ms
        out_of_sync: dict[int, str] = {}
        for broker_id in self._isr.isr:
            if broker_id == self.local_broker_id:
                continue
            replica = self._remote.get(broker_id)
            if replica is None or not replica.state.is_caught_up(leader_end, now, lag):
                out_of_sync[broker_id] = repr(replica or broker_id)
        if not out_of_sync:
            return
        log_event(
            _log,
            logging.INFO,
            "isr_shrinking",
            partition=str(self.topic_partition),
            isr=",".join(map(str, self._isr.isr)),
            out_of_sync=" ".join(out_of_sync.values()),
            high_watermark=self.log.high_watermark,
            log_end_offset=leader_end,
        )
        self._submit_isr_change(
            tuple(b for b in self._isr.isr if b not in out_of_sync), self._isr.maximal_isr
        )

    def _submit_isr_change(self, isr: tuple[int, ...], maximal_isr: frozenset[int]) -> None:
        proposed = replace(self.state, isr=isr)
        self._isr = IsrState(self._isr.isr, maximal_isr, proposed)
        self._context.spawn(self._alter_partition(proposed), f"alter isr {self.topic_partition}")

    async def _alter_partition(self, proposed: PartitionState) -> None:
        while True:
            try:
                stored = await self._context.alter_partition.submit(self.topic_partition, proposed)
                break
            except Exception as e:
                if self._isr.sent is not proposed or self.log.deleted:
                    return
                log_event(
                    _log,
                    logging.WARNING,
                    "isr_update_retrying",
                    partition=str(self.topic_partition),
                    reason=repr(e),
                )
                await asyncio.sleep(ALTER_PARTITION_RETRY_BACKOFF_S)
        if self._isr.sent is proposed:
            self._handle_alter_partition_result(proposed, stored)

    def _handle_alter_partition_result(
        self, proposed: PartitionState, stored: PartitionState | None
    ) -> None:
        """Adopt the stored ISR if the leadership is still ours (our write, or another
        one that won the compare-and-set: the next checks reconsider from there);
        otherwise fall back to the committed ISR until the new leadership arrives."""
        if (
            stored is None
            or stored.leader != self.local_broker_id
            or stored.leader_epoch != self.state.leader_epoch
            or stored.partition_epoch < self.state.partition_epoch
        ):
            self._isr = committed(self._isr.isr)
            log_event(
                _log,
                logging.INFO,
                "isr_update_superseded",
                partition=str(self.topic_partition),
                proposed=",".join(map(str, proposed.isr)),
            )
            return
        self.state = replace(self.state, isr=stored.isr, partition_epoch=stored.partition_epoch)
        self._isr = committed(stored.isr)
        log_event(
            _log,
            logging.INFO,
            "isr_updated",
            partition=str(self.topic_partition),
            isr=",".join(map(str, stored.isr)),
            partition_epoch=stored.partition_epoch,
            won=stored.isr == proposed.isr,
        )
        self._maybe_increment_leader_hw(self._context.clock_ms())
        self._context.on_delayed_work(self.topic_partition)
