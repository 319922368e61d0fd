"""Where a leader gathers appended records into batches before writing them to the log,
and a snapshot writer its records (Kafka's ``BatchAccumulator``).

Appends are atomic: the records of one `append` always land in one batch, which may
also hold earlier appends' records; a batch is completed when the next append would
overflow it, when the linger time of its first append has passed, or on `drain`. A
record appended with ``delay_drain`` (Kafka 4.0's prepareAppend) and everything after
it stays in the accumulator until `allow_drain`. Offsets are assigned at append time, so
the caller learns the offset its last record will have.

Event-loop only: the Raft client drains it in its poll; the state machine appends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from tiercel.protocol.errors import RecordBatchTooLargeError
from tiercel.protocol.record_batch import RECORD_BATCH_OVERHEAD
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.protocol.records import size_of_varint
from tiercel.server.raft.control_record import (
    control_batch,
    snapshot_footer_record,
    snapshot_header_record,
)
from tiercel.server.raft.errors import NotLeaderError
from tiercel.server.raft.record_serde import RecordSerde
from tiercel.server.raft.timer import Time

__all__ = ["BatchAccumulator", "CompletedBatch"]

T = TypeVar("T")

_NO_DEADLINE: Final = 2**63 - 1
# A record's fixed bytes besides its value and offset delta: attributes, timestamp delta
# 0, null key (varint -1), no headers (Kafka's BatchBuilder writes nothing else).
_RECORD_FIXED_BYTES: Final = 4


@dataclass(slots=True)
class CompletedBatch(Generic[T]):
    """A batch ready for the log: its bytes and, for a data batch, the records it was
    built from (the leader hands those to its own listeners without decoding)."""

    base_offset: int
    num_records: int
    records: Sequence[T] | None
    data: bytes
    append_timestamp: int

    @property
    def size_in_bytes(self) -> int:
        return len(self.data)

    def drainable(self, drain_offset: int) -> bool:
        return self.base_offset + self.num_records - 1 < drain_offset


@dataclass(slots=True)
class _OpenBatch(Generic[T]):
    base_offset: int
    append_time: int
    records: list[T] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    size: int = RECORD_BATCH_OVERHEAD


class BatchAccumulator(Generic[T]):
    """Invariant: completed batches are contiguous in offsets and end at ``next_offset``
    minus the records of the open batch."""

    def __init__(
        self,
        epoch: int,
        base_offset: int,
        linger_ms: int,
        max_batch_size: int,
        max_number_of_batches: int,
        time: Time,
        serde: RecordSerde[T],
    ) -> None:
        self.epoch = epoch
        self.next_offset = base_offset
        self._linger_ms = linger_ms
        self._max_batch_size = max_batch_size
        self._max_number_of_batches = max_number_of_batches
        self._time = time
        self._serde = serde
        self._current: _OpenBatch[T] | None = None
        self._completed: deque[CompletedBatch[T]] = deque()
        self._drain_offset = _NO_DEADLINE
        self._linger_deadline = _NO_DEADLINE

    def append(self, epoch: int, records: Sequence[T], delay_drain: bool) -> int:
        """Append ``records`` to one batch; the offset of the last one. NotLeaderError if
        ``epoch`` is stale, RecordBatchTooLargeError if they cannot fit one batch."""
        if epoch < self.epoch:
            raise NotLeaderError(
                f"Append failed because the given epoch {epoch} is stale. "
                f"Current leader epoch = {self.epoch}"
            )
        if epoch > self.epoch:
            raise ValueError(
                f"Attempt to append from epoch {epoch} which is larger than the current "
                f"epoch {self.epoch}"
            )
        if len(self._completed) >= self._max_number_of_batches:
            raise RuntimeError(
                f"Attempting to append records when the number of batches "
                f"{len(self._completed)} reached {self._max_number_of_batches}"
            )
        values = [self._serde.write(record) for record in records]
        batch = self._batch_with_room_for(values)
        if delay_drain:
            self._drain_offset = min(self._drain_offset, self.next_offset)
        for record, value in zip(records, values, strict=True):
            batch.size += _record_size(len(batch.values), value)
            batch.records.append(record)
            batch.values.append(value)
        if self._linger_deadline == _NO_DEADLINE:
            self._linger_deadline = self._time.milliseconds() + self._linger_ms
        self.next_offset += len(records)
        return self.next_offset - 1

    def _batch_with_room_for(self, values: Sequence[bytes]) -> _OpenBatch[T]:
        alone = RECORD_BATCH_OVERHEAD + sum(_record_size(i, v) for i, v in enumerate(values))
        if alone > self._max_batch_size:
            raise RecordBatchTooLargeError(
                f"The total record(s) size of {alone} exceeds the maximum allowed batch size "
                f"of {self._max_batch_size}"
            )
        current = self._current
        if current is not None:
            first = len(current.values)
            needed = sum(_record_size(first + i, v) for i, v in enumerate(values))
            if current.size + needed <= self._max_batch_size:
                return current
            self._complete_current_batch()
        current = self._current = _OpenBatch(self.next_offset, self._time.milliseconds())
        return current

    def allow_drain(self) -> None:
        """Let the records appended with ``delay_drain`` go (Kafka's allowDrain)."""
        self._drain_offset = _NO_DEADLINE

    def append_control_messages(self, messages: Sequence[Any], timestamp: int) -> int:
        """Complete the open batch, then add one control batch of ``messages``; the
        offset of its last record."""
        self.force_drain()
        data = control_batch(self.next_offset, self.epoch, timestamp, messages)
        batch = CompletedBatch[T](self.next_offset, len(messages), None, data, timestamp)
        self._completed.append(batch)
        self.next_offset += len(messages)
        return self.next_offset - 1

    def append_snapshot_header_record(self, last_contained_log_timestamp: int, now: int) -> None:
        self.append_control_messages([snapshot_header_record(last_contained_log_timestamp)], now)

    def append_snapshot_footer_record(self, now: int) -> None:
        self.append_control_messages([snapshot_footer_record()], now)

    def force_drain(self) -> None:
        """Complete the open batch now, whatever the linger time."""
        if self._current is not None and self._current.values:
            self._complete_current_batch()
        self._current = None
        # The linger clock starts again with the next append.
        self._linger_deadline = _NO_DEADLINE

    def _complete_current_batch(self) -> None:
        batch = self._current
        assert batch is not None
        data = build_record_batch(
            [SimpleRecord(None, value, timestamp=batch.append_time) for value in batch.values],
            base_offset=batch.base_offset,
            partition_leader_epoch=self.epoch,
        )
        self._completed.append(
            CompletedBatch(
                batch.base_offset, len(batch.values), batch.records, data, batch.append_time
            )
        )
        self._current = None

    def time_until_drain(self, now: int) -> int:
        if self._completed and self._completed[0].drainable(self._drain_offset):
            return 0
        return max(0, self._linger_deadline - now)

    def needs_drain(self, now: int) -> bool:
        return self.time_until_drain(now) <= 0

    def drain(self) -> list[CompletedBatch[T]]:
        """Complete the open batch and take every batch allowed to go."""
        self.force_drain()
        drained = []
        while self._completed and self._completed[0].drainable(self._drain_offset):
            drained.append(self._completed.popleft())
        return drained

    @property
    def is_empty(self) -> bool:
        """No append since the last drain: the linger clock is not running (Kafka's
        isEmpty, which tells the client whether an append is the first to wake it for)."""
        return self._linger_deadline == _NO_DEADLINE

    def close(self) -> None:
        self._completed.clear()
        self._current = None


def _record_size(offset_delta: int, value: bytes) -> int:
    body = _RECORD_FIXED_BYTES + size_of_varint(offset_delta) + size_of_varint(len(value))
    body += len(value)
    return size_of_varint(body) + body
