"""One partition of a ListOffsets request on this broker (Kafka's
ReplicaManager.fetchOffset): the partition's lookup (`Partition.fetch_offset_for_timestamp`,
across both tiers) with its errors turned into a per-partition result, so that one bad
partition never fails the request.

A lookup landing at or past what the asker may read (the HW, or the LSO under
read_committed) finds nothing; while a new leader's high watermark still lags its epoch
the answer is OFFSET_NOT_AVAILABLE, LEADER_NOT_AVAILABLE for versions before 5, which
lack that error (KIP-207). A timestamp the request's version cannot carry (-3 before v7,
-4 before v8, ...) is UNSUPPORTED_VERSION.

Event-loop only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tiercel.protocol.errors import (
    KafkaError,
    LeaderNotAvailableError,
    OffsetNotAvailableError,
    UnsupportedVersionError,
)
from tiercel.protocol.list_offsets import (
    OFFSET_NOT_AVAILABLE_MIN_VERSION,
    IsolationLevel,
    is_timestamp_unsupported,
)
from tiercel.server.error_mapping import as_kafka_error
from tiercel.server.partition import Partition
from tiercel.server.remote_log_reads import RemoteLogReads
from tiercel.storage.log_values import TimestampAndOffset
from tiercel.storage.topic_partition import TopicPartition

__all__ = ["ListOffsetsResult", "fetch_offset"]


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    error: KafkaError | None = None
    found: TimestampAndOffset | None = None


async def fetch_offset(
    get_partition_or_error: Callable[[TopicPartition], Partition],
    tp: TopicPartition,
    timestamp: int,
    isolation_level: IsolationLevel | None,
    current_leader_epoch: int | None,
    fetch_only_from_leader: bool,
    version: int,
    remote: RemoteLogReads | None,
    remote_timeout_ms: int,
) -> ListOffsetsResult:
    """See the module docstring; ``remote`` is the broker's RemoteLogManager (None
    without tiering), a remote lookup longer than ``remote_timeout_ms`` is
    REQUEST_TIMED_OUT (KIP-1075)."""
    try:
        if is_timestamp_unsupported(timestamp, version):
            raise UnsupportedVersionError(
                f"timestamp {timestamp} is not supported by ListOffsets v{version}"
            )
        partition = get_partition_or_error(tp)
        holder = await partition.fetch_offset_for_timestamp(
            timestamp,
            isolation_level,
            current_leader_epoch,
            fetch_only_from_leader,
            remote,
            remote_timeout_ms,
        )
        found = holder.found
        last = holder.last_fetchable_offset
        if found is None or (last is not None and found.offset >= last):
            if holder.offsets_error is not None:
                raise holder.offsets_error
            found = None
        return ListOffsetsResult(found=found)
    except OffsetNotAvailableError as e:
        if version < OFFSET_NOT_AVAILABLE_MIN_VERSION:
            return ListOffsetsResult(LeaderNotAvailableError(str(e)))
        return ListOffsetsResult(e)
    except Exception as e:
        return ListOffsetsResult(as_kafka_error(e, f"list_offsets on {tp}"))
