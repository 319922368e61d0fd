"""Where each registered listener is in the log (Kafka's ``KafkaRaftClient.ListenerContext``):
the next offset it expects, the reader it has not closed yet, and the last leader
change it was told of."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Final, Generic, TypeVar

from tiercel.server.raft.batch import Batch
from tiercel.server.raft.leader_and_epoch import UNKNOWN_LEADER_AND_EPOCH, LeaderAndEpoch
from tiercel.server.raft.raft_client_listener import Listener, MemoryBatchReader
from tiercel.server.raft.records_snapshot import SnapshotReader

__all__ = ["ListenerContext"]

T = TypeVar("T")
_log: Final = logging.getLogger("tiercel.raft")

# A new listener: it starts from the latest snapshot, or from offset 0 without one.
STARTING_NEXT_OFFSET: Final = -1
SMALLEST_LOG_OFFSET: Final = 0


class ListenerContext(Generic[T]):
    """Invariant: ``next_offset`` is one past the last record the listener acknowledged
    (closed); with a reader outstanding the next commit starts after its last batch.
    Event-loop only."""

    def __init__(self, listener: Listener[T], wakeup: Callable[[], None]) -> None:
        self.listener = listener
        self._wakeup = wakeup
        self.next_offset = STARTING_NEXT_OFFSET
        self._last_sent: MemoryBatchReader[T] | None = None
        self._last_fired_leader_change = UNKNOWN_LEADER_AND_EPOCH

    @property
    def next_expected_offset(self) -> int:
        if self._last_sent is not None:
            return self._last_sent.last_offset + 1
        return self.next_offset

    def reset_offset_to_smallest_log_offset(self) -> None:
        """A new listener of an empty partition: no log, no snapshot."""
        self.next_offset = SMALLEST_LOG_OFFSET

    def fire_handle_snapshot(self, reader: SnapshotReader[T]) -> None:
        self.next_offset = reader.snapshot_id.offset
        self._last_sent = None
        _log.debug("loading snapshot %s into %r", reader.snapshot_id, self.listener)
        self.listener.handle_load_snapshot(reader)

    def fire_handle_commit(self, batches: Sequence[Batch[T]]) -> None:
        reader = MemoryBatchReader(batches, self._on_close)
        self._last_sent = reader
        self.listener.handle_commit(reader)

    def _on_close(self, reader: MemoryBatchReader[T]) -> None:
        self.next_offset = max(self.next_offset, reader.last_offset + 1)
        if self._last_sent is reader:
            self._last_sent = None
            self._wakeup()

    def _should_fire_leader_change(self, leader: LeaderAndEpoch) -> bool:
        last = self._last_fired_leader_change
        if leader == last:
            return False
        if leader.epoch > last.epoch:
            return True
        return leader.leader_id is not None and last.leader_id is None

    def maybe_fire_leader_change(
        self, leader: LeaderAndEpoch, epoch_start_offset: int | None = None
    ) -> None:
        """Tell the listener; of this replica's own leadership (``epoch_start_offset``
        given) only once it acknowledged records past the epoch's start, so it has seen
        every committed record before it writes as leader."""
        if not self._should_fire_leader_change(leader):
            return
        if epoch_start_offset is not None and self.next_offset <= epoch_start_offset:
            return
        self._last_fired_leader_change = leader
        self.listener.handle_leader_change(leader)
