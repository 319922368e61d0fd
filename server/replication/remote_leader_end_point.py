"""RemoteLeaderEndPoint: the fetcher's requests, sent to the leader's broker.

Kafka's ``RemoteLeaderEndPoint`` with ``ReplicaFetcherThread``'s request parameters:

- Fetch (v12+: diverging epochs, KIP-320) with this broker's id as replica id (a field
  before v15, ReplicaState from v15, KIP-903), replica.fetch.wait.max.ms,
  replica.fetch.min.bytes, replica.fetch.response.max.bytes, per partition
  replica.fetch.max.bytes, read_uncommitted, no fetch session (id 0, epoch -1: every
  request is a full fetch), topic ids from v13;
- OffsetForLeaderEpoch (v3+ carries the replica id);
- ListOffsets as a replica (it sees the log end, not the high watermark).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tiercel.protocol.errors import ErrorCode
from tiercel.server.replication.broker_client import BrokerClient
from tiercel.server.replication.fetch_state import (
    EpochEndOffset,
    FetchPartition,
    FetchPartitionData,
)
from tiercel.storage.topic_partition import TopicPartition

_FETCH_KEY: Final = 1
_FETCH_VERSIONS: Final = (12, 17)
_TOPIC_IDS_VERSION: Final = 13
_LIST_OFFSETS_KEY: Final = 2
_LIST_OFFSETS_VERSIONS: Final = (1, 8)
_OFFSET_FOR_LEADER_EPOCH_KEY: Final = 23
_OFFSET_FOR_LEADER_EPOCH_VERSIONS: Final = (3, 4)
_EARLIEST_TIMESTAMP: Final = -2
_LATEST_TIMESTAMP: Final = -1
_EARLIEST_LOCAL: Final = -4  # KIP-405, ListOffsets v8+
_NO_SESSION: Final = 0
_FINAL_EPOCH: Final = -1


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """The follower's fetch parameters (broker config replica.fetch.*)."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    response_max_bytes: int


class RemoteLeaderEndPoint:
    """Implements `LeaderEndPoint` over a `BrokerClient`. Event-loop only."""

    def __init__(self, client: BrokerClient, config: FetcherConfig) -> None:
        self._client = client
        self._config = config

    @property
    def leader_id(self) -> int:
        return self._client.target_id

    def close(self) -> None:
        self._client.close()

    async def fetch(
        self, partitions: Mapping[TopicPartition, FetchPartition]
    ) -> dict[TopicPartition, FetchPartitionData]:
        config = self._config
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        ids: dict[str, uuid.UUID] = {}
        for tp, p in partitions.items():
            ids[tp.topic] = p.topic_id
            by_topic[tp.topic].append(
                {
                    "partition": tp.partition,
                    "current_leader_epoch": p.current_leader_epoch,
                    "fetch_offset": p.fetch_offset,
                    "last_fetched_epoch": p.last_fetched_epoch,
                    "log_start_offset": p.log_start_offset,
                    "partition_max_bytes": p.max_bytes,
                }
            )
        body = {
            "replica_id": config.replica_id,
            "replica_state": {"replica_id": config.replica_id, "replica_epoch": -1},
            "max_wait": config.max_wait_ms,
            "min_bytes": config.min_bytes,
            "max_bytes": config.response_max_bytes,
            "isolation_level": 0,
            "session_id": _NO_SESSION,
            "session_epoch": _FINAL_EPOCH,
            "topics": [
                {"topic": name, "topic_id": ids[name], "partitions": parts}
                for name, parts in by_topic.items()
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        version, response = await self._client.request(_FETCH_KEY, _FETCH_VERSIONS, body)
        names = {topic_id: name for name, topic_id in ids.items()}
        result: dict[TopicPartition, FetchPartitionData] = {}
        for topic in response.responses:
            name = names.get(topic.topic_id) if version >= _TOPIC_IDS_VERSION else topic.topic
            if name is None:
                continue
            for p in topic.partitions:
                diverging = p.diverging_epoch
                result[TopicPartition(name, p.partition_index)] = FetchPartitionData(
                    ErrorCode(p.error_code),
                    p.high_watermark,
                    p.log_start_offset,
                    p.records or b"",
                    (diverging.epoch, diverging.end_offset)
                    if diverging is not None and diverging.epoch >= 0
                    else None,
                )
        if response.error_code != ErrorCode.none:
            # A request-level error (FETCH_SESSION_ID_NOT_FOUND, ...) applies to all.
            error = ErrorCode(response.error_code)
            return {tp: FetchPartitionData(error) for tp in partitions}
        return result

    async def fetch_epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochEndOffset]:
        by_topic: dict[str, list[dict[str, int]]] = defaultdict(list)
        for tp, (current_leader_epoch, epoch) in partitions.items():
            by_topic[tp.topic].append(
                {
                    "partition": tp.partition,
                    "current_leader_epoch": current_leader_epoch,
                    "leader_epoch": epoch,
                }
            )
        body = {
            "replica_id": self._config.replica_id,
            "topics": [{"topic": name, "partitions": parts} for name, parts in by_topic.items()],
        }
        _, response = await self._client.request(
            _OFFSET_FOR_LEADER_EPOCH_KEY, _OFFSET_FOR_LEADER_EPOCH_VERSIONS, body
        )
        result = {}
        for topic in response.topics:
            for p in topic.partitions:
                result[TopicPartition(topic.topic, p.partition)] = EpochEndOffset(
                    ErrorCode(p.error_code), p.leader_epoch, p.end_offset
                )
        return result

    async def fetch_earliest_offset(
        self, tp: TopicPartition, current_leader_epoch: int
    ) -> tuple[ErrorCode, int]:
        return await self._list_offset(tp, current_leader_epoch, _EARLIEST_TIMESTAMP)

    async def fetch_latest_offset(
        self, tp: TopicPartition, current_leader_epoch: int
    ) -> tuple[ErrorCode, int]:
        return await self._list_offset(tp, current_leader_epoch, _LATEST_TIMESTAMP)

    async def fetch_earliest_local_offset(
        self, tp: TopicPartition, current_leader_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        return await self._list_offset_and_epoch(tp, current_leader_epoch, _EARLIEST_LOCAL)

    async def _list_offset(
        self, tp: TopicPartition, current_leader_epoch: int, timestamp: int
    ) -> tuple[ErrorCode, int]:
        error, offset, _ = await self._list_offset_and_epoch(tp, current_leader_epoch, timestamp)
        return error, offset

    async def _list_offset_and_epoch(
        self, tp: TopicPartition, current_leader_epoch: int, timestamp: int
    ) -> tuple[ErrorCode, int, int]:
        body = {
            "replica_id": self._config.replica_id,
            "isolation_level": 0,
            "topics": [
                {
                    "name": tp.topic,
                    "partitions": [
                        {
                            "partition_index": tp.partition,
                            "current_leader_epoch": current_leader_epoch,
                            "timestamp": timestamp,
                        }
                    ],
                }
            ],
        }
        _, response = await self._client.request(_LIST_OFFSETS_KEY, _LIST_OFFSETS_VERSIONS, body)
        for topic in response.topics:
            for p in topic.partitions:
                if topic.name == tp.topic and p.partition_index == tp.partition:
                    return ErrorCode(p.error_code), p.offset, getattr(p, "leader_epoch", -1)
        return ErrorCode.unknown_topic_or_partition, -1, -1
