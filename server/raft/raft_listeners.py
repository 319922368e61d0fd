"""The listeners registered with a Raft client and what each has been given (the
listener half of Kafka's KafkaRaftClient: pollListeners, updateListenersProgress,
maybeFireHandleCommit, maybeFireLeaderChange).

A listener gets committed batches in order from the offset it expects next, read back
from the log, or the leader's own batches from memory as they commit; when it expects
an offset the log no longer has (a new listener, or the log start moved past it), the
latest snapshot first. Registrations take effect at the client's next poll, so that a
listener is never called from inside ``register``. Event-loop only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from tiercel.server.raft.batch import Batch
from tiercel.server.raft.leader_and_epoch import LeaderAndEpoch
from tiercel.server.raft.listener_context import STARTING_NEXT_OFFSET, ListenerContext
from tiercel.server.raft.raft_client_listener import Listener
from tiercel.server.raft.record_serde import RecordSerde
from tiercel.server.raft.records_iterator import iter_decoded_batches
from tiercel.server.raft.records_snapshot import RecordsSnapshotReader
from tiercel.server.raft.replicated_log import Isolation, ReplicatedLog

__all__ = ["RaftListeners"]

T = TypeVar("T")


class RaftListeners(Generic[T]):
    """Invariant: a listener's context exists from the poll after its registration until
    the poll after its unregistration."""

    def __init__(
        self, log: ReplicatedLog, serde: RecordSerde[T], wakeup: Callable[[], None]
    ) -> None:
        self._log = log
        self._serde = serde
        self._wakeup = wakeup
        self._contexts: dict[int, ListenerContext[T]] = {}
        self._pending: list[tuple[bool, Listener[T]]] = []

    def register(self, listener: Listener[T]) -> None:
        self._pending.append((True, listener))
        self._wakeup()

    def unregister(self, listener: Listener[T]) -> None:
        self._pending.append((False, listener))

    def apply_registrations(self) -> None:
        pending, self._pending = self._pending, []
        for register, listener in pending:
            key = id(listener)
            if register and key not in self._contexts:
                self._contexts[key] = ListenerContext(listener, self._wakeup)
            elif not register:
                self._contexts.pop(key, None)

    def begin_shutdown(self) -> None:
        for context in self._contexts.values():
            context.listener.begin_shutdown()

    def update_progress(self, high_watermark: int) -> None:
        """Give every listener what is committed below ``high_watermark`` and new to it."""
        for context in list(self._contexts.values()):
            self._update_progress(context, high_watermark)

    def _update_progress(self, context: ListenerContext[T], high_watermark: int) -> None:
        next_offset = context.next_expected_offset
        start = self._log.start_offset
        if next_offset < high_watermark and (
            next_offset == STARTING_NEXT_OFFSET or next_offset < start
        ):
            raw = self._log.latest_snapshot()
            if raw is not None:
                context.fire_handle_snapshot(RecordsSnapshotReader(raw, self._serde))
            elif next_offset == STARTING_NEXT_OFFSET:
                context.reset_offset_to_smallest_log_offset()
            else:
                raise RuntimeError(
                    f"Snapshot expected since next offset of {context.listener!r} is "
                    f"{next_offset}, log start offset is {start} and high-watermark is "
                    f"{high_watermark}"
                )
        elif next_offset == STARTING_NEXT_OFFSET:
            context.reset_offset_to_smallest_log_offset()
        next_offset = context.next_expected_offset
        if 0 <= next_offset < high_watermark:
            records = self._log.read(next_offset, Isolation.COMMITTED).records
            batches = list(iter_decoded_batches(records, self._serde))
            if batches:
                context.fire_handle_commit(batches)

    def fire_handle_commit(self, batch: Batch[T]) -> None:
        """A committed batch of the leader's own, from memory, to the listeners whose next
        offset it is."""
        for context in self._contexts.values():
            if context.next_expected_offset == batch.base_offset:
                context.fire_handle_commit([batch])

    def fire_leader_change(self, leader: LeaderAndEpoch, epoch_start_offset: int | None) -> None:
        for context in self._contexts.values():
            context.maybe_fire_leader_change(leader, epoch_start_offset)
