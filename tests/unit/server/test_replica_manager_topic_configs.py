"""A log loaded at start-up takes its topic's config when the metadata names it.

A KRaft broker loads its logs before it replays the metadata log, so a log on disk is
opened with the broker's defaults; ReplicaManager.on_topic must then apply the topic's
overrides (a compacted topic's cleanup.policy, a tiered topic's remote.storage.enable)
to it, as it does for a config change. Before the fix, a restarted broker kept the
defaults: its tiered follower never joined the remote log manager (the tiered cluster
test's restarted follower stayed out of the ISR) and a compacted topic was deleted by
retention."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from tiercel.config.broker_config import BrokerConfig
from tiercel.config.log_config import LogConfig
from tiercel.server.metadata.metadata_cache import MetadataCache, TopicMetadata
from tiercel.server.partition import PartitionState
from tiercel.server.replica_manager import ReplicaManager
from tiercel.storage.log_manager import LogManager
from tiercel.storage.scheduler import Scheduler
from tiercel.storage.topic_partition import TopicPartition

NODE = 1
TOPIC_ID = uuid.UUID(int=7)
OVERRIDES = {"cleanup.policy": "compact", "remote.storage.enable": "true"}


class NoIsrChanges:
    async def submit(self, tp: TopicPartition, proposed: PartitionState) -> PartitionState | None:
        raise AssertionError(f"unexpected ISR change of {tp}")


async def _run_broker(
    config: BrokerConfig, overrides: dict[str, dict[str, str]], topic: TopicMetadata
) -> LogConfig:
    """Start the broker's logs with what ``overrides`` holds at start-up, then apply
    ``topic``; the partition's log config afterwards."""
    scheduler = Scheduler(asyncio.get_running_loop(), 2)

    def config_for(name: str) -> LogConfig:
        return LogConfig.from_overrides(config, overrides.get(name, {}))

    log_manager = LogManager(config, scheduler, config_for)
    await log_manager.startup(None)
    rm = ReplicaManager(
        config, NODE, log_manager, scheduler, config_for, MetadataCache(NODE, "c"), NoIsrChanges()
    )
    try:
        overrides[topic.name] = topic.config_overrides
        await rm.on_topic(topic.name, topic)
        log = rm.partitions[TopicPartition(topic.name, 0)].log
        assert log.remote_log_enabled is (overrides[topic.name] == OVERRIDES)
        return log.config
    finally:
        rm.shutdown()
        await rm.fetcher_manager.shutdown()
        await log_manager.shutdown()
        await scheduler.drain()
        scheduler.shutdown()


async def test_a_log_loaded_before_the_metadata_takes_its_topic_config(tmp_path: Path) -> None:
    config = BrokerConfig(
        {"node.id": NODE, "log.dirs": [str(tmp_path)], "remote.log.storage.system.enable": True}
    )
    leader = PartitionState(NODE, 0, (NODE,), (NODE,))
    topic = TopicMetadata("t", TOPIC_ID, {0: (NODE,)}, {0: leader}, dict(OVERRIDES))
    # The first run creates the log with the topic's config.
    first = await _run_broker(config, {}, topic)
    assert first.cleanup_policy == ("compact",)
    # After a restart the log is loaded with the defaults, before the metadata arrives.
    second = await _run_broker(config, {}, topic)
    assert second == first
