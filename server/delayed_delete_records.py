"""DelayedDeleteRecords: a DeleteRecords request waiting for every replica to follow.

Event-loop only. Kafka's ``DelayedDeleteRecords``: the leader has moved its log start
offset; each partition of the request stays pending until its low watermark (the
smallest log start offset over the leader and its live followers, as their fetches
report it) reaches the offset asked for, or it fails (leadership moved, partition
gone). A partition's outcome is fixed the first time it settles; partitions still
pending when the request's timeout_ms passes answer REQUEST_TIMED_OUT with the low
watermark they had when the request arrived.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from tiercel.protocol.errors import (
    InvalidTopicError,
    KafkaError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.partition import Partition
from tiercel.storage.topic_partition import TopicPartition

INVALID_LOW_WATERMARK = -1


@dataclass(slots=True)
class DeleteRecordsPartitionStatus:
    """One partition of a DeleteRecords request: the offset asked for (-1 once failed)
    and the result so far (Kafka's DeleteRecordsPartitionStatus)."""

    required_offset: int
    low_watermark: int
    error: KafkaError | None = None
    acks_pending: bool = False


def delete_records_on_local_log(
    partition_for: Callable[[TopicPartition], Partition],
    tp: TopicPartition,
    offset: int,
    internal_topics: AbstractSet[str],
) -> DeleteRecordsPartitionStatus:
    """Move the leader's log start offset (Kafka's ReplicaManager.deleteRecordsOnLocalLog);
    ``partition_for`` raises for a partition not hosted here. Internal topics' records
    are their coordinators' to delete."""
    try:
        if tp.topic in internal_topics:
            raise InvalidTopicError(f"Cannot delete records of internal topic {tp.topic}")
        requested, low_watermark = partition_for(tp).delete_records_on_leader(offset)
    except Exception as e:
        return DeleteRecordsPartitionStatus(-1, INVALID_LOW_WATERMARK, as_kafka_error(e, str(tp)))
    return DeleteRecordsPartitionStatus(requested, low_watermark)


class DelayedDeleteRecords:
    """Invariant: a partition no longer pending keeps its result."""

    def __init__(
        self,
        status: Mapping[TopicPartition, DeleteRecordsPartitionStatus],
        get_partition: Callable[[TopicPartition], Partition | None],
    ) -> None:
        self._status = status
        self._get_partition = get_partition
        for s in status.values():
            s.acks_pending = s.error is None

    def try_complete(self) -> bool:
        """Settle what can be settled; True when no partition is pending any more."""
        for tp, status in self._status.items():
            if status.acks_pending:
                self._check(tp, status)
        return not any(s.acks_pending for s in self._status.values())

    def _check(self, tp: TopicPartition, status: DeleteRecordsPartitionStatus) -> None:
        partition = self._get_partition(tp)
        if partition is None or partition.log.deleted:
            status.error = UnknownTopicOrPartitionError(f"{tp} is no longer hosted here")
        elif not partition.is_leader:
            status.error = NotLeaderOrFollowerError(f"this broker no longer leads {tp}")
        else:
            low_watermark = partition.low_watermark_if_leader()
            if low_watermark < status.required_offset:
                return
            status.low_watermark = low_watermark
            status.acks_pending = False
            return
        status.low_watermark = INVALID_LOW_WATERMARK
        status.acks_pending = False

    def on_expiration(self, timeout_ms: int) -> None:
        """The request is answered now: what is still pending timed out."""
        for tp, status in self._status.items():
            if status.acks_pending:
                status.error = RequestTimedOutError(
                    f"the replicas of {tp} did not all reach log start offset "
                    f"{status.required_offset} within {timeout_ms} ms"
                )
                status.acks_pending = False
