"""What the state machines on top of Raft implement and receive (Kafka's
``RaftClient.Listener`` and ``BatchReader``).

A listener gets committed data only, in log order, each batch once per load: batches
through `handle_commit` (from memory on the leader, read back from the log elsewhere) and,
when it must start over from a snapshot, a `handle_load_snapshot` after which every
earlier commit is void. It closes every reader it is given; the client sends the next
commit once it knows where the previous one ended.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

from tiercel.server.raft.batch import Batch
from tiercel.server.raft.leader_and_epoch import LeaderAndEpoch
from tiercel.server.raft.records_snapshot import SnapshotReader

__all__ = ["BatchReader", "Listener", "MemoryBatchReader"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


class BatchReader(Protocol[T_co]):
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    def __iter__(self) -> Iterator[Batch[T_co]]: ...
    def close(self) -> None: ...


class Listener(Protocol[T_contra]):
    """Called on the event loop from the client's poll; must not block it."""

    def handle_commit(self, reader: BatchReader[T_contra]) -> None:
        """Committed batches; the listener closes ``reader`` once it consumed them."""

    def handle_load_snapshot(self, reader: SnapshotReader[T_contra]) -> None:
        """Start over from this snapshot; earlier commits are void. Close ``reader``."""

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        """A new epoch, or the leader of the epoch became known. This replica's own
        leadership is told only once the listener has caught up to the epoch's start,
        so a state machine never writes before it has seen every committed record."""

    def begin_shutdown(self) -> None:
        """The client is shutting down: stop appending."""


class MemoryBatchReader(Generic[T]):
    """Batches already decoded (Kafka's MemoryBatchReader): the leader's own appends,
    or batches read back from the log. Event-loop only."""

    def __init__(
        self, batches: Sequence[Batch[T]], on_close: Callable[[MemoryBatchReader[T]], None]
    ) -> None:
        if not batches:
            raise ValueError("a batch reader needs at least one batch")
        self._batches = batches
        self._on_close = on_close
        self._closed = False

    @property
    def base_offset(self) -> int:
        return self._batches[0].base_offset

    @property
    def last_offset(self) -> int:
        return self._batches[-1].last_offset

    def __iter__(self) -> Iterator[Batch[T]]:
        return iter(self._batches)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close(self)
