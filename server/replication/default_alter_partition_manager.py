"""A KRaft leader's ISR changes, sent to the active controller as AlterPartition (Kafka's
DefaultAlterPartitionManager).

The controller checks the leader epoch and the partition epoch the change was made
from, writes a PartitionChangeRecord and answers with the partition's new state; every
broker then learns it from the metadata log. Errors that say the change lost to another
one (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, UNKNOWN_TOPIC_OR_PARTITION,
OPERATION_NOT_ATTEMPTED, INELIGIBLE_REPLICA) are not retried: the leader falls back to
its committed ISR until the metadata log brings the state that won (Kafka's
Partition.handleAlterPartitionError); any other error is raised so that the leader tries
again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Final

from tiercel.protocol.errors import ErrorCode, KafkaError, error_for_code
from tiercel.server.node_to_controller_channel import NodeToControllerChannel
from tiercel.server.partition import PartitionState
from tiercel.storage.topic_partition import TopicPartition

__all__ = ["DefaultAlterPartitionManager"]

_ALTER_PARTITION: Final = 56
# v2 names topics by id, v3 adds the ISR members' broker epochs (KIP-903); Kafka 4.0
# has only those two.
_VERSIONS: Final = (2, 3)
_RECOVERED: Final = 0
_LOST_TO_ANOTHER_CHANGE: Final = frozenset(
    {
        ErrorCode.fenced_leader_epoch,
        ErrorCode.invalid_update_version,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.operation_not_attempted,
        ErrorCode.ineligible_replica,
    }
)


class DefaultAlterPartitionManager:
    """Implements `server.partition_isr.AlterPartitionManager` with the controller.
    Event-loop only."""

    def __init__(
        self,
        broker_id: int,
        broker_epoch: Callable[[], int],
        topic_id_of: Callable[[str], uuid.UUID | None],
        registered_epoch_of: Callable[[int], int],
        channel: NodeToControllerChannel,
        retry_timeout_s: float,
    ) -> None:
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._topic_id_of = topic_id_of
        self._registered_epoch_of = registered_epoch_of
        self._channel = channel
        self._retry_timeout_s = retry_timeout_s

    async def submit(self, tp: TopicPartition, proposed: PartitionState) -> PartitionState | None:
        topic_id = self._topic_id_of(tp.topic)
        if topic_id is None:
            return None
        body = {
            "broker_id": self._broker_id,
            "broker_epoch": self._broker_epoch(),
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition_index": tp.partition,
                            "leader_epoch": proposed.leader_epoch,
                            "new_isr_with_epochs": [
                                {"broker_id": b, "broker_epoch": self._registered_epoch_of(b)}
                                for b in proposed.isr
                            ],
                            "leader_recovery_state": _RECOVERED,
                            "partition_epoch": proposed.partition_epoch,
                        }
                    ],
                }
            ],
        }
        response = await self._channel.send(
            _ALTER_PARTITION, _VERSIONS, body, self._retry_timeout_s
        )
        if response.error_code != ErrorCode.none:
            raise error_for_code(response.error_code, f"AlterPartition {tp}: top-level error")
        for topic in response.topics:
            for partition in topic.partitions:
                if partition.partition_index != tp.partition:
                    continue
                if partition.error_code in _LOST_TO_ANOTHER_CHANGE:
                    return None
                if partition.error_code != ErrorCode.none:
                    raise error_for_code(partition.error_code, f"AlterPartition {tp}")
                return PartitionState(
                    leader=int(partition.leader_id),
                    leader_epoch=int(partition.leader_epoch),
                    isr=tuple(int(b) for b in partition.isr),
                    replicas=proposed.replicas,
                    partition_epoch=int(partition.partition_epoch),
                )
        raise KafkaError(f"AlterPartition {tp}: the controller's answer has no such partition")
