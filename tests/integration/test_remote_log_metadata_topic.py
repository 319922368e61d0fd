"""The topic-based RemoteLogMetadataManager's remote path against a real broker
process: two managers in this process (two "brokers" that lead no metadata
partition) write and read ``__remote_log_metadata`` through Produce and Fetch requests
to the broker that leads it, and a stock Kafka client reads the records back as Kafka
would have written them (null key, RemoteLogMetadataSerde value).

Until the broker starts the manager itself (the RemoteLogManager will), the managers'
metadata cache is filled here from what the broker reports."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from support.broker import BrokerProcess
from support.clients import consume, create_topic
from tiercel.config.broker_config import Listener
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.zk_data import BrokerRegistration
from tiercel.server.partition import PartitionState
from tiercel.server.remote_log_metadata_topic import BrokerRemoteLogMetadataTopic
from tiercel.server.replication.broker_client import BrokerClient
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_serde import deserialize, serialize
from tiercel.tiered.rlmm.remote_log_metadata_topic_client import REMOTE_LOG_METADATA_TOPIC_NAME
from tiercel.tiered.rlmm.topic_based_remote_log_metadata_manager import (
    TopicBasedRemoteLogMetadataManager,
)
from tiercel.tiered.rlmm.topic_based_rlmm_config import TopicBasedRemoteLogMetadataManagerConfig
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

NAME = REMOTE_LOG_METADATA_TOPIC_NAME
PARTITIONS = 2
CONFIG = TopicBasedRemoteLogMetadataManagerConfig(
    topic_num_partitions=PARTITIONS, consume_wait_ms=20_000, fetch_max_wait_ms=200
)
USER = TopicIdPartition(uuid.UUID(int=12345), TopicPartition("orders", 3))


class NoLocalReplicas:
    """These managers' broker leads no metadata partition."""

    partitions: dict[TopicPartition, Any] = {}

    async def append_records(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no local leader")

    async def fetch_messages(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no local leader")


def _topic_id(bootstrap: str) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.describe_topics(TopicCollection([NAME]))
    description = futures[NAME].result(timeout=30)
    most = description.topic_id.get_most_significant_bits() & (2**64 - 1)
    least = description.topic_id.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(most << 64) | least)


def _manager(
    broker: BrokerProcess, topic_id: uuid.UUID, node_id: int, snapshots: Path
) -> TopicBasedRemoteLogMetadataManager:
    assert broker.port is not None
    port = broker.port
    cache = MetadataCache(node_id, "cluster")
    cache.put_brokers({1: BrokerRegistration(1, (Listener("PLAINTEXT", "127.0.0.1", port),))})
    state = PartitionState(1, 0, (1,), (1,))
    cache.put_topic(
        TopicMetadata(
            NAME,
            topic_id,
            {p: (1,) for p in range(PARTITIONS)},
            {p: state for p in range(PARTITIONS)},
        )
    )

    def client(leader: int) -> BrokerClient:
        return BrokerClient(leader, lambda: ("127.0.0.1", port), f"rlmm-test-{node_id}", 10)

    topic = BrokerRemoteLogMetadataTopic(node_id, NoLocalReplicas(), cache, None, client, CONFIG)  # type: ignore[arg-type]
    return TopicBasedRemoteLogMetadataManager(topic, CONFIG, str(snapshots))


async def _ready(manager: TopicBasedRemoteLogMetadataManager) -> None:
    async with asyncio.timeout(30):
        while not manager.is_ready(USER):
            await asyncio.sleep(0.02)


def test_managers_share_the_metadata_through_a_remote_leader(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(
        broker.bootstrap, NAME, PARTITIONS, {"cleanup.policy": "delete", "retention.ms": "-1"}
    )
    topic_id = _topic_id(broker.bootstrap)
    segment = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(USER.topic_id, USER.topic_partition, uuid.uuid4()),
        0,
        99,
        99,
        2,
        0,
        4096,
        {0: 0},
        custom_metadata=b"rsm",
    )
    finished = RemoteLogSegmentMetadataUpdate(
        segment.remote_log_segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 2
    )

    async def scenario() -> int:
        leader = _manager(broker, topic_id, 2, tmp_path / "b2")
        follower = _manager(broker, topic_id, 3, tmp_path / "b3")
        leader.start()
        follower.start()
        try:
            leader.on_partition_leadership_changes({USER}, set())
            follower.on_partition_leadership_changes(set(), {USER})
            await _ready(leader)
            await _ready(follower)
            await leader.add_remote_log_segment_metadata(segment)
            await leader.update_remote_log_segment_metadata(finished)
            assert leader.remote_log_segment_metadata(USER, 0, 50) is not None
            async with asyncio.timeout(30):
                while follower.remote_log_segment_metadata(USER, 0, 50) is None:
                    await asyncio.sleep(0.02)
            assert follower.list_remote_log_segments(USER) == leader.list_remote_log_segments(USER)
            return leader.metadata_partition(USER)
        finally:
            await leader.close()
            await follower.close()

    metadata_partition = asyncio.run(scenario())

    consumed = consume("confluent", broker.bootstrap, NAME, 2, partitions=[metadata_partition])
    assert [r.key for r in consumed.records] == [None, None]
    assert [r.value for r in consumed.records] == [serialize(segment), serialize(finished)]
    assert deserialize(consumed.records[0].value or b"") == segment
