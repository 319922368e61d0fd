"""Partition: this broker's view of one partition — leadership, epoch, ISR, high watermark.

Event-loop only. The controller decides leadership and epochs (through the
MetadataStore); `make_leader` applies them. The leader appends through its `Log`
(stamping each batch with the current leader epoch, which the epoch cache records) and
advances the high watermark to the smallest log end offset over the ISR, seed 002's rule.
On a single node the ISR is this broker alone, so the HW follows the log end offset; the
remote-replica bookkeeping of issue 4 plugs into `_maybe_increment_leader_hw`.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Final

from config.log_format import log_event
from protocol.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    UnknownLeaderEpochError,
)
from storage.log import Log
from storage.log_validator import ValidatedRecords
from storage.log_values import FetchDataInfo, FetchIsolation, LogAppendInfo, LogOffsetMetadata
from storage.topic_partition import TopicPartition

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


@dataclass(slots=True)
class Partition:
    topic_partition: TopicPartition
    topic_id: uuid.UUID
    log: Log
    local_broker_id: int
    state: PartitionState = field(default_factory=lambda: PartitionState(-1, -1, (), ()))

    # -- leadership --------------------------------------------------------------------

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.local_broker_id

    def make_leader(self, state: PartitionState) -> bool:
        """Become (or stay) leader with the controller's epoch; True if anything changed.

        A new epoch is recorded in the epoch cache with the current log end offset as its
        start (seed 000: the leader appends the entry when its epoch begins)."""
        if state == self.state:
            return False
        is_new_epoch = state.leader_epoch != self.state.leader_epoch
        self.state = state
        if is_new_epoch:
            # The epoch starts at the log end offset (seed 000: the new leader records
            # it before accepting writes), so OffsetForLeaderEpoch knows it at once.
            self.log.maybe_assign_epoch_start_offset(state.leader_epoch, self.log.log_end_offset)
            log_event(
                _log,
                logging.INFO,
                "became_leader",
                partition=str(self.topic_partition),
                leader_epoch=state.leader_epoch,
                log_end_offset=self.log.log_end_offset,
            )
        self._maybe_increment_leader_hw()
        return True

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
        if required_acks == -1 and len(self.state.isr) < self.log.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"ISR {list(self.state.isr)} of {self.topic_partition} is smaller than "
                f"min.insync.replicas={self.log.config.min_insync_replicas}"
            )

    def append_records_to_leader(
        self, validated: ValidatedRecords, required_acks: int, now_ms: int
    ) -> LogAppendInfo:
        self._check_leader()
        self.check_min_isr(required_acks)
        info = self.log.append_as_leader(validated, self.leader_epoch, now_ms)
        self._maybe_increment_leader_hw()
        return info

    def _maybe_increment_leader_hw(self) -> bool:
        """HW = min log end offset over the ISR; on one node, the local log end offset."""
        if not self.is_leader:
            return False
        before = self.log.high_watermark
        return self.log.update_high_watermark(self.log.log_end_offset) > before

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
        if last_fetched_epoch >= 0:
            # KIP-320: the fetcher's log diverges if its last epoch ends earlier here than
            # where it wants to read, or is unknown here: tell it where to truncate.
            epoch, end_offset = log.end_offset_for_epoch(last_fetched_epoch)
            if epoch < last_fetched_epoch or end_offset < fetch_offset:
                return LogReadResult(
                    FetchDataInfo(LogOffsetMetadata(fetch_offset), b""),
                    log.high_watermark,
                    log.log_start_offset,
                    log.log_end_offset,
                    log.high_watermark,
                    (epoch, end_offset),
                )
        info = log.read(fetch_offset, max_bytes, isolation, min_one_message)
        return LogReadResult(
            info,
            log.high_watermark,
            log.log_start_offset,
            log.log_end_offset,
            log.high_watermark,
        )

    def last_offset_for_leader_epoch(
        self, current_leader_epoch: int | None, leader_epoch: int
    ) -> tuple[int, int]:
        self._check_leader(current_leader_epoch)
        return self.log.end_offset_for_epoch(leader_epoch)

    def delete_records_on_leader(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset (-1 means the high watermark);
        returns the new low watermark."""
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
        return log.log_start_offset
