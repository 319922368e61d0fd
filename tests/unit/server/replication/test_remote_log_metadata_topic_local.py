"""The topic-based RemoteLogMetadataManager over this broker's own ReplicaManager: when
the broker leads the metadata partitions, events are appended with acks=all to the real
log and read back through the long-poll fetch path, with no network and no fakes of the
broker's components."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from replication_support import Broker

from tiercel.protocol.record_batch import iter_batches
from tiercel.server.delayed_fetch import FetchRequestPartition
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.partition import PartitionState
from tiercel.server.remote_log_metadata_topic import (
    BrokerRemoteLogMetadataTopic,
    RequestClient,
    metadata_fetch_from_records,
)
from tiercel.storage.log_values import FetchIsolation
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_serde import serialize
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

METADATA_TOPIC_ID = uuid.UUID(int=99)
CONFIG = TopicBasedRemoteLogMetadataManagerConfig(
    topic_num_partitions=2, consume_wait_ms=10_000, fetch_max_wait_ms=200
)
USER = TopicIdPartition(uuid.UUID(int=5), TopicPartition("orders", 0))


def _no_remote_leader(leader: int) -> RequestClient:
    raise AssertionError(f"broker 1 leads every metadata partition, not {leader}")


async def test_writes_go_through_the_local_log_and_come_back_through_fetch(
    broker: Broker, tmp_path: Path
) -> None:
    state = PartitionState(1, 0, (1,), (1,))
    metadata = TopicMetadata(
        REMOTE_LOG_METADATA_TOPIC_NAME,
        METADATA_TOPIC_ID,
        {p: (1,) for p in range(2)},
        {p: state for p in range(2)},
    )
    await broker.rm.on_topic(REMOTE_LOG_METADATA_TOPIC_NAME, metadata)
    cache = MetadataCache(1, "cluster")
    cache.put_topic(metadata)
    topic = BrokerRemoteLogMetadataTopic(
        1,
        broker.rm,
        cache,
        None,
        _no_remote_leader,
        CONFIG,  # type: ignore[arg-type]
    )
    manager = TopicBasedRemoteLogMetadataManager(topic, CONFIG, str(tmp_path / "snapshots"))
    manager.start()
    try:
        manager.on_partition_leadership_changes({USER}, set())
        async with asyncio.timeout(10):
            while not manager.is_ready(USER):
                await asyncio.sleep(0.01)
        segment = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(USER.topic_id, USER.topic_partition, uuid.uuid4()),
            0,
            99,
            99,
            1,
            0,
            4096,
            {0: 0},
        )
        await manager.add_remote_log_segment_metadata(segment)
        finished = RemoteLogSegmentMetadataUpdate(
            segment.remote_log_segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
        )
        await manager.update_remote_log_segment_metadata(finished)

        assert manager.remote_log_segment_metadata(USER, 0, 42) == segment.create_with_updates(
            finished
        )
        # The metadata partition's log holds Kafka's record values, one batch each.
        mp = TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, manager.metadata_partition(USER))
        (result,) = await broker.rm.fetch_messages(
            [FetchRequestPartition(mp, 0, 1 << 20, None)],
            0,
            1,
            1 << 20,
            FetchIsolation.HIGH_WATERMARK,
        )
        assert result.read is not None
        data = result.read.info.records
        assert len(list(iter_batches(data))) == 2
        values = [v for _, v in metadata_fetch_from_records(data, 0, 2).records]
        assert values == [serialize(segment), serialize(finished)]
    finally:
        await manager.close()
