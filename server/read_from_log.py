"""One pass of a Fetch over its partitions (Kafka's ReplicaManager.readFromLog).

The response's byte budget is shared in order and the first partition with data may
exceed it by one batch (KIP-74); a later partition whose first batch does not fit in
what is left answers no records, never a fragment of that batch (Kafka's
checkFetchDataInfo; `LogSegment.read` and the remote read return no bytes then). A
read below the local log start of a log whose older records are remote
(``log_start_offset <= offset < local_log_start_offset``, KIP-405) is not out of range:
a consumer's becomes a `RemoteStorageFetchInfo` for the remote tier (served by
`DelayedRemoteFetch`), a follower's is OFFSET_MOVED_TO_TIERED_STORAGE, which sends it
to rebuild its state from the remote tier. Event-loop only.
"""

from __future__ import annotations

from collections.abc import Callable

from tiercel.protocol.errors import OffsetMovedToTieredStorageError, OffsetOutOfRangeError
from tiercel.server.delayed_fetch import FetchRequestPartition, FetchResult
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.partition import LogReadResult, Partition
from tiercel.storage.log_values import FetchDataInfo, FetchIsolation, LogOffsetMetadata
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.remote_log_reader import RemoteStorageFetchInfo

__all__ = ["read_from_log"]


def read_from_log(
    get_partition: Callable[[TopicPartition], Partition],
    requests: list[FetchRequestPartition],
    max_bytes: int,
    isolation: FetchIsolation,
    replica_id: int,
    update_fetch_state: bool,
) -> list[FetchResult]:
    """Read every partition of the fetch; a follower's read (``replica_id`` >= 0) also
    records where the follower is, unless ``update_fetch_state`` is False (the re-read
    after a long poll)."""
    limit = max_bytes
    min_one_message = True
    results = []
    for request in requests:
        partition: Partition | None = None
        max_partition_bytes = min(request.max_bytes, limit)
        try:
            partition = get_partition(request.topic_partition)
            if replica_id >= 0:
                read = partition.fetch_records_for_follower(
                    replica_id,
                    request.fetch_offset,
                    request.log_start_offset,
                    max_partition_bytes,
                    min_one_message,
                    request.current_leader_epoch,
                    request.last_fetched_epoch,
                    update_fetch_state,
                )
            else:
                read = partition.read_records(
                    request.fetch_offset,
                    max_partition_bytes,
                    isolation,
                    min_one_message,
                    request.current_leader_epoch,
                    request.last_fetched_epoch,
                )
        except Exception as e:
            results.append(
                _read_error_result(
                    partition,
                    request,
                    e,
                    replica_id,
                    max_partition_bytes,
                    min_one_message,
                    isolation,
                )
            )
            continue
        size = read.info.size
        if size:
            min_one_message = False
            limit = max(limit - size, 0)
        results.append(FetchResult(read))
    return results


def _read_error_result(
    partition: Partition | None,
    request: FetchRequestPartition,
    error: Exception,
    replica_id: int,
    max_bytes: int,
    min_one_message: bool,
    isolation: FetchIsolation,
) -> FetchResult:
    """Kafka's readFromLog catch: an offset below the local start of a tiered log is
    for the remote tier; any other failure is the partition's error."""
    offset = request.fetch_offset
    log = partition.log if partition is not None else None
    if (
        partition is None
        or log is None
        or not isinstance(error, OffsetOutOfRangeError)
        or not log.remote_log_enabled
        or not log.log_start_offset <= offset < log.local_log_start_offset
    ):
        return FetchResult(None, as_kafka_error(error, f"fetch from {request.topic_partition}"))
    if replica_id >= 0:
        return FetchResult(
            None,
            OffsetMovedToTieredStorageError(
                f"offset {offset} of {request.topic_partition} is below the local log start "
                f"offset {log.local_log_start_offset}: it is in the remote tier"
            ),
        )
    tip = TopicIdPartition(partition.topic_id, partition.topic_partition)
    read = LogReadResult(
        FetchDataInfo(LogOffsetMetadata(offset), b""),
        log.high_watermark,
        log.log_start_offset,
        log.log_end_offset,
        log.last_stable_offset,
    )
    # The isolation travels with the read (Kafka's RemoteStorageFetchInfo.fetchIsolation):
    # a read_committed one comes back with its aborted transactions.
    info = RemoteStorageFetchInfo(max_bytes, min_one_message, tip, offset, isolation)
    return FetchResult(read, remote_fetch_info=info)
