"""Transactional offset commits (KIP-98, KIP-447): offsets a transactional producer
commits for a group with TxnOffsetCommit stay pending until the transaction's marker
reaches the group's __consumer_offsets partition: COMMIT makes them the group's
committed offsets, ABORT drops them (Kafka's GroupMetadata
pendingTransactionalOffsetCommits and ``onTransactionCompleted``).

The records are written to __consumer_offsets as a transactional batch of the producer
(its id and epoch), acks=-1, so that the partition's producer state fences a stale
producer epoch and the marker closes the batch's transaction like any other. A loaded
partition replays the same: transactional offset records wait for their producer's
marker in the log. A pending offset makes OffsetFetch with require_stable answer
UNSTABLE_OFFSET_COMMIT for that partition. As Kafka's coordinator, the batch carries
sequence 0 and is appended as AppendOrigin.COORDINATOR: its producer epoch is checked,
its sequence is not.

The commits are pending from the moment their records are appended, before the write
is acknowledged (Kafka's GroupMetadata.prepareTxnOffsetCommit): an ABORT marker appended
after them may complete first, in the same high watermark advance, and must find them
to drop them. The write's answer then only updates an entry still pending
(onTxnOffsetCommitAppend), or drops it if the write failed (failPendingTxnOffsetCommit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from tiercel.config.logging_setup import log_event
from tiercel.protocol.errors import ErrorCode
from tiercel.protocol.record_batch import NO_SEQUENCE
from tiercel.protocol.record_builder import SimpleRecord, build_record_batch
from tiercel.server.coordinator.group.coordinator_records import (
    OffsetCommitKey,
    encode_key,
    encode_offset_commit_value,
)
from tiercel.server.coordinator.group.group_config import GROUP_METADATA_TOPIC_NAME
from tiercel.server.coordinator.group.offset_and_metadata import OffsetAndMetadata
from tiercel.server.coordinator.group.offset_store import OffsetStore
from tiercel.server.replica_manager import ReplicaManager
from tiercel.server.transaction_verification import (
    maybe_start_transaction_verification_for_partition,
)
from tiercel.storage.topic_partition import TopicPartition

_log: Final = logging.getLogger("tiercel.group_coordinator")

# How Kafka 4 answers a TxnOffsetCommit whose verification or write failed
# (CoordinatorOperationExceptionHelper.handleOperationException): a verification that
# could not reach the transaction coordinator (NETWORK_EXCEPTION, which clients do not
# retry here; librdkafka aborts the transaction) asks the client to retry as a load in
# progress. NOT_ENOUGH_REPLICAS_AFTER_APPEND stays retriable as Kafka 3's storeOffsets
# made it: Kafka 4 passes it on, and librdkafka would abort on it.
_COMMIT_ERRORS: Final = {
    ErrorCode.network_exception: ErrorCode.coordinator_load_in_progress,
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
    ErrorCode.invalid_fetch_size: ErrorCode.unknown_server_error,
}


def txn_offset_commit_error(error: ErrorCode) -> ErrorCode:
    """The TxnOffsetCommit error for a failed verification or write."""
    return _COMMIT_ERRORS.get(error, error)


PendingOffsets = dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]]


class PendingTxnOffsets:
    """Invariants: no producer maps to an empty dict, no group to an empty dict; an
    entry whose write is not yet answered has record offset -1.
    Event-loop only."""

    def __init__(self) -> None:
        self._pending: PendingOffsets = {}

    def prepare(
        self, producer_id: int, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        """The commits' records are being appended (Kafka's prepareTxnOffsetCommit)."""
        if offsets:
            self._pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)

    def on_append(
        self,
        producer_id: int,
        group_id: str,
        prepared: Mapping[TopicPartition, OffsetAndMetadata],
        written: Mapping[TopicPartition, OffsetAndMetadata] | None,
    ) -> None:
        """The write of ``prepared`` was answered: each entry still the one prepared
        takes its record offset from ``written``, or goes if the write failed (None).
        One a marker completed meanwhile, or a later commit replaced, stays as it is."""
        groups = self._pending.get(producer_id)
        pending = None if groups is None else groups.get(group_id)
        if groups is None or pending is None:
            return
        for tp, offset in prepared.items():
            if pending.get(tp) is not offset:
                continue
            if written is None:
                del pending[tp]
            else:
                pending[tp] = written[tp]
        if not pending:
            del groups[group_id]
        if not groups:
            del self._pending[producer_id]

    def load(self, pending: PendingOffsets) -> None:
        """Install what a partition load left pending (no marker yet)."""
        for producer_id, groups in pending.items():
            for group_id, offsets in groups.items():
                self.prepare(producer_id, group_id, offsets)

    def is_pending(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in groups.get(group_id, {}) for groups in self._pending.values())

    def has_pending(self, group_id: str) -> bool:
        return any(group_id in groups for groups in self._pending.values())

    def complete(
        self,
        producer_id: int,
        committed: bool,
        in_partition: Callable[[str], bool],
        offsets: OffsetStore,
    ) -> int:
        """The producer's transaction ended for the groups ``in_partition`` selects: on
        commit their pending offsets become committed (unless a later commit of the
        partition is already there); the number of offsets that did."""
        groups = self._pending.get(producer_id)
        if groups is None:
            return 0
        moved = 0
        for group_id in [g for g in groups if in_partition(g)]:
            pending = groups.pop(group_id)
            if committed:
                for tp, offset in pending.items():
                    if offset.record_offset < 0:
                        # Kafka's completePendingTxnOffsetCommit refuses this
                        # (IllegalStateException): the producer ended its transaction
                        # before its TxnOffsetCommit was answered.
                        log_event(
                            _log,
                            logging.ERROR,
                            "txn_offset_committed_before_written",
                            producer_id=producer_id,
                            group=group_id,
                            partition=str(tp),
                        )
                        continue
                    offsets.put(group_id, tp, offset)
                    moved += 1
        if not groups:
            del self._pending[producer_id]
        return moved

    def remove_group(self, group_id: str) -> None:
        for producer_id in list(self._pending):
            groups = self._pending[producer_id]
            groups.pop(group_id, None)
            if not groups:
                del self._pending[producer_id]


async def append_txn_offsets(
    replica_manager: ReplicaManager,
    pending: PendingTxnOffsets,
    timeout_ms: int,
    tp: TopicPartition,
    transactional_id: str,
    group_id: str,
    producer_id: int,
    producer_epoch: int,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> ErrorCode:
    """Write the commits as one transactional batch of the producer, pending in
    ``pending`` from its append on. The producer's first write to the partition in a
    transaction is verified with its coordinator first (KIP-890 part 1; Kafka's
    coordinator maps those errors as any failed write)."""
    partition = replica_manager.partitions.get(tp)
    if partition is None or not partition.is_leader:
        return ErrorCode.not_coordinator
    records = [
        SimpleRecord(
            encode_key(OffsetCommitKey(group_id, t.topic, t.partition)),
            encode_offset_commit_value(o.to_value()),
            timestamp=o.commit_timestamp_ms,
        )
        for t, o in offsets.items()
    ]
    # Sequence 0, as Kafka's coordinator writes them (CoordinatorRuntime): a
    # coordinator's append has its epoch checked, not its sequence.
    batch = build_record_batch(
        records,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=0,
        is_transactional=True,
    )
    verification, guard = await maybe_start_transaction_verification_for_partition(
        replica_manager, tp, transactional_id, producer_id, producer_epoch, NO_SEQUENCE
    )
    if verification != ErrorCode.none:
        return txn_offset_commit_error(verification)
    # Nothing awaits from here to the leader's local append of the batch.
    pending.prepare(producer_id, group_id, offsets)
    results = await replica_manager.append_records(
        timeout_ms, -1, {tp: batch}, internal_topics_allowed=True, verification_guards={tp: guard}
    )
    result = results[tp]
    if result.error is not None:
        pending.on_append(producer_id, group_id, offsets, None)
        return txn_offset_commit_error(result.error.error_code)
    assert result.info is not None
    first = result.info.first_offset
    written = {t: o.at(first + i) for i, (t, o) in enumerate(offsets.items())}
    pending.on_append(producer_id, group_id, offsets, written)
    return ErrorCode.none


def offsets_partition(partition_for: Callable[[str], int], group_id: str) -> TopicPartition:
    return TopicPartition(GROUP_METADATA_TOPIC_NAME, partition_for(group_id))


def groups_of(
    partitions: Iterable[int], partition_for: Callable[[str], int]
) -> Callable[[str], bool]:
    wanted = set(partitions)
    return lambda group_id: partition_for(group_id) in wanted
