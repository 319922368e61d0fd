"""WriteTxnMarkers (27): a transaction coordinator has partition leaders end a
transaction by appending its COMMIT or ABORT marker (KIP-98).

As Kafka's ``KafkaApis.handleWriteTxnMarkersRequest``, for each marker and each listed
partition: a partition this broker does not host is UNKNOWN_TOPIC_OR_PARTITION; one it
hosts but does not lead NOT_LEADER_OR_FOLLOWER; otherwise a control batch with the
producer id and epoch and the coordinator epoch is appended as the leader, acks=all,
internal topics included (Kafka's AppendOrigin.COORDINATOR), and the answer waits for
the ISR. The producer state refuses a marker older than the producer's epoch
(INVALID_PRODUCER_EPOCH) or from an older coordinator than the last marker's
(TRANSACTION_COORDINATOR_FENCED). A marker that closes no open transaction is written
all the same, as in Kafka (a coordinator retries markers until every leader has one).

Versions 1 only: Kafka 4 dropped v0, and v2 carries the transaction version of KIP-890
part 2, whose epoch rules belong with the transaction coordinator (not built yet).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Any, Final

from tiercel.protocol.end_txn_marker import ControlRecordType, EndTransactionMarker
from tiercel.protocol.errors import (
    ErrorCode,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from tiercel.server.authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from tiercel.server.authorizer.auth_helper import authorize
from tiercel.server.coordinator.group.group_config import GROUP_METADATA_TOPIC_NAME
from tiercel.server.partition import Partition
from tiercel.server.replica_manager import ProduceResult
from tiercel.server.request_context import RequestContext
from tiercel.storage.log_transactions import EndTxnMarkerEntry
from tiercel.storage.log_values import LogAppendInfo
from tiercel.storage.topic_partition import TopicPartition

API_KEY: Final = 27
MIN_VERSION: Final = 1
MAX_VERSION: Final = 1

# Kafka's request.timeout.ms default, which bounds its wait for the ISR here.
_APPEND_TIMEOUT_MS: Final = 30_000


def _refused(request: Any) -> dict[str, Any]:
    """WriteTxnMarkersRequest.getErrorResponse of CLUSTER_AUTHORIZATION_FAILED: every
    partition of every marker."""
    return {
        "markers": [
            {
                "producer_id": marker.producer_id,
                "topics": [
                    {
                        "name": topic.name,
                        "partitions": [
                            {
                                "partition_index": index,
                                "error_code": ErrorCode.cluster_authorization_failed,
                            }
                            for index in topic.partition_indexes
                        ],
                    }
                    for topic in marker.topics
                ],
            }
            for marker in request.markers
        ]
    }


async def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # Sent by transaction coordinators: ALTER on the cluster, else CLUSTER_ACTION
    # (Kafka's handleWriteTxnMarkersRequest).
    altering = authorize(
        ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False
    )
    if not altering and not authorize(
        ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        return _refused(request)
    replica_manager = ctx.broker.replica_manager
    markers = []
    for marker in request.markers:
        control_type = (
            ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT
        )
        entry = EndTxnMarkerEntry(
            marker.producer_id,
            marker.producer_epoch,
            EndTransactionMarker(control_type, marker.coordinator_epoch),
        )
        results: dict[TopicPartition, ProduceResult] = {}
        hosted: dict[TopicPartition, EndTxnMarkerEntry] = {}
        for topic in marker.topics:
            for index in topic.partition_indexes:
                tp = TopicPartition(topic.name, index)
                if tp not in replica_manager.partitions:
                    results[tp] = ProduceResult(
                        UnknownTopicOrPartitionError(f"this broker does not host {tp}")
                    )
                elif tp.topic == GROUP_METADATA_TOPIC_NAME and not (
                    ctx.broker.group_coordinator.can_complete_transaction(tp.partition)
                ):
                    # Its groups are not loaded here (yet): the transaction coordinator
                    # retries (GroupCoordinator.can_complete_transaction says why).
                    results[tp] = ProduceResult(
                        NotLeaderOrFollowerError(f"the groups of {tp} are not loaded here")
                    )
                else:
                    hosted[tp] = entry
        if hosted:
            appends = {tp: functools.partial(_append_marker, entry) for tp, entry in hosted.items()}
            results.update(await replica_manager.append_to_leaders(_APPEND_TIMEOUT_MS, -1, appends))
            # Kafka's handler tells the group coordinator which __consumer_offsets
            # partitions got the marker: the producer's pending transactional offsets
            # there are committed or dropped (TxnOffsetCommit).
            offsets_partitions = [
                tp.partition
                for tp, result in results.items()
                if tp.topic == GROUP_METADATA_TOPIC_NAME and result.error is None
            ]
            if offsets_partitions:
                ctx.broker.group_coordinator.on_transaction_completed(
                    marker.producer_id, offsets_partitions, bool(marker.transaction_result)
                )
        markers.append({"producer_id": marker.producer_id, "topics": _topics(results)})
    return {"markers": markers}


async def _append_marker(
    entry: EndTxnMarkerEntry, tp: TopicPartition, partition: Partition, now: int, acks: int
) -> LogAppendInfo:
    """Kafka's appendRecords with AppendOrigin.COORDINATOR, for one partition."""
    return partition.append_end_txn_marker(entry, now)


def _topics(results: dict[TopicPartition, ProduceResult]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, result in results.items():
        error = result.error
        by_topic[tp.topic].append(
            {
                "partition_index": tp.partition,
                "error_code": ErrorCode.none if error is None else error.error_code,
            }
        )
    return [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]
