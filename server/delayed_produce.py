"""DelayedProduce: an acks=all produce waiting until the ISR has its appends.

Event-loop only. As Kafka's ``DelayedProduce``, each partition appended to keeps a
status that is pending until it settles — with an error, or once enough replicas reach
the append (``Partition.check_enough_replicas_reach_offset``) — and a settled status is
never re-evaluated: a partition whose leadership moves away and back while another
partition of the same request still waits keeps the outcome it had, instead of being
judged by the new leadership's log (where the acknowledged offset may have been
truncated and now hold another record). Partitions still pending when the request
expires get REQUEST_TIMED_OUT (Kafka's ``onExpiration``/``onComplete``).

Beyond Kafka, a status also remembers the partition object and the leader epoch of
its append: a partition deleted (or recreated) or whose leader epoch changed since
then settles with an error. Kafka settles these on the leadership change itself,
which completes the delayed produces of the partition; here the request's other
appends may await (validation in the executor, a flush) before the request starts
waiting, and a leadership change in that gap would go unseen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tiercel.protocol.errors import (
    KafkaError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from tiercel.server.partition import Partition
from tiercel.storage.topic_partition import TopicPartition


@dataclass(slots=True)
class ProducePartitionStatus:
    """One partition of a delayed produce (Kafka's ProducePartitionStatus): the append
    ends before ``required_offset``; it was made by ``partition`` in ``leader_epoch``.
    Once ``acks_pending`` is False, ``error`` is the partition's final outcome."""

    partition: Partition
    required_offset: int
    leader_epoch: int
    acks_pending: bool = True
    error: KafkaError | None = None


class DelayedProduce:
    """Invariant: a status leaves the pending state at most once, and its outcome never
    changes afterwards. Event-loop only."""

    __slots__ = ("_get_partition", "statuses")

    def __init__(
        self,
        statuses: Mapping[TopicPartition, ProducePartitionStatus],
        get_partition: Callable[[TopicPartition], Partition | None],
    ) -> None:
        self.statuses = statuses
        self._get_partition = get_partition

    def try_complete(self) -> bool:
        """Settle what can be settled now; True once no partition is pending."""
        for tp, status in self.statuses.items():
            if status.acks_pending:
                done, error = self._check(tp, status)
                if done or error is not None:
                    status.acks_pending = False
                    status.error = error
        return not any(status.acks_pending for status in self.statuses.values())

    def _check(
        self, tp: TopicPartition, status: ProducePartitionStatus
    ) -> tuple[bool, KafkaError | None]:
        partition = self._get_partition(tp)
        if partition is not status.partition:
            return True, UnknownTopicOrPartitionError(f"{tp} was deleted before it was replicated")
        if partition.leader_epoch != status.leader_epoch:
            return True, NotLeaderOrFollowerError(
                f"the leader epoch of {tp} moved from {status.leader_epoch} to "
                f"{partition.leader_epoch} before the append was replicated"
            )
        return partition.check_enough_replicas_reach_offset(status.required_offset)

    def on_expiration(self, timeout_ms: int) -> None:
        """The request is answered now: what is still pending timed out."""
        for tp, status in self.statuses.items():
            if status.acks_pending:
                status.acks_pending = False
                status.error = RequestTimedOutError(
                    f"{tp} was not replicated to the ISR within {timeout_ms} ms"
                )
