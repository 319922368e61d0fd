"""The topic-based RemoteLogMetadataManager built by `create_topic_based_rlmm` against a
three-broker cluster, from this test process acting as a broker that leads nothing:
its metadata cache, MetadataListener and AdminManager are the broker's own, on the
cluster's ZooKeeper. The manager creates ``__remote_log_metadata`` (replication factor
3), and its writes survive the SIGKILL of the metadata partition's leader: the next
write retries until the new leader answers, and a manager started afterwards reads
every event back."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from support.cluster import ClusterProcess
from tiercel.config.broker_config import BrokerConfig
from tiercel.server.admin_manager import AdminManager
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.metadata.metadata_listener import MetadataListener
from tiercel.server.metadata.zk_store import ZooKeeperMetadataStore
from tiercel.server.remote_log_metadata_topic import create_topic_based_rlmm
from tiercel.storage.topic_partition import TopicIdPartition, TopicPartition
from tiercel.tiered.rlmm.remote_log_metadata_topic_client import REMOTE_LOG_METADATA_TOPIC_NAME
from tiercel.tiered.rlmm.topic_based_remote_log_metadata_manager import (
    TopicBasedRemoteLogMetadataManager,
)
from tiercel.tiered.rsm.remote_storage_manager import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)

NAME = REMOTE_LOG_METADATA_TOPIC_NAME
USER = TopicIdPartition(uuid.UUID(int=777), TopicPartition("orders", 1))
PROPS = {
    "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
    "rlmm.config.remote.log.metadata.consume.wait.ms": "60000",
    "rlmm.config.remote.log.metadata.consumer.fetch.max.wait.ms": "200",
}


class LeadsNothing:
    """This process hosts no replica: every request goes to a leader over the network."""

    partitions: dict[TopicPartition, Any] = {}

    async def append_records(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no local replica")

    async def fetch_messages(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no local replica")


async def _noop(name: str, topic: TopicMetadata | None) -> None:
    pass


class Observer:
    """A broker's metadata pieces in this process, for one node id."""

    def __init__(self, cluster: ClusterProcess, node_id: int, directory: Path) -> None:
        self.config = BrokerConfig(
            {
                "node.id": node_id,
                "log.dirs": [str(directory)],
                "zookeeper.connect": cluster.zk_connect,
            }
        )
        self.store = ZooKeeperMetadataStore(cluster.zk_connect)
        self.cache = MetadataCache(node_id, "cluster")
        self.listener = MetadataListener(self.store, self.cache, _noop)

    async def __aenter__(self) -> Observer:
        await self.store.start()
        await self.listener.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.listener.stop()
        await self.store.close()

    def manager(self) -> TopicBasedRemoteLogMetadataManager:
        admin = AdminManager(self.config, self.store, self.cache)
        manager = create_topic_based_rlmm(
            self.config, self.config.node_id, LeadsNothing(), self.cache, admin, PROPS
        )
        manager.start()
        manager.on_partition_leadership_changes(set(), {USER})
        return manager


async def _until(condition: Any, timeout_s: float = 60) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.05)


def test_writes_survive_the_metadata_leader_being_killed(
    cluster: ClusterProcess, tmp_path: Path
) -> None:
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
    finished = RemoteLogSegmentMetadataUpdate(
        segment.remote_log_segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
    )

    async def scenario() -> int:
        async with Observer(cluster, 101, tmp_path / "101") as observer:
            manager = observer.manager()
            try:
                await _until(lambda: manager.is_ready(USER))
                await manager.add_remote_log_segment_metadata(segment)
                metadata_partition = manager.metadata_partition(USER)
                assignment = cluster.assignment(NAME)
                assert len(assignment) == 3 and all(len(r) == 3 for r in assignment.values())
                leader = cluster.leader_of(NAME, metadata_partition)
                cluster.kill(leader)
                # Sent to the dead leader first, retried until the new one answers.
                await manager.update_remote_log_segment_metadata(finished)
                found = manager.remote_log_segment_metadata(USER, 0, 50)
                assert found == segment.create_with_updates(finished)
            finally:
                await manager.close()
        assert cluster.leader_of(NAME, metadata_partition) != leader
        # A broker that never saw either write reads both back.
        async with Observer(cluster, 102, tmp_path / "102") as observer:
            fresh = observer.manager()
            try:
                await _until(lambda: fresh.is_ready(USER))
                assert fresh.list_remote_log_segments(USER) == [
                    segment.create_with_updates(finished)
                ]
            finally:
                await fresh.close()
        return leader

    asyncio.run(scenario())
